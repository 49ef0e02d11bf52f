#include "kan/data/function_catalogue.h"

#include <ATen/ATen.h>
#include <boost/math/special_functions/jacobi_elliptic.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <utility>

namespace kan {
namespace {

constexpr double kPi = M_PI;

// The inputs as float64 on the CPU, after checking their shape against the function's.
torch::Tensor cpu_float64_inputs(const torch::Tensor& x, const std::string& name, int64_t n_var) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == n_var, "reference function '", name, "' takes (N, ",
              n_var, ") inputs, got shape ", x.sizes());
  return x.to(torch::kCPU, torch::kFloat64).contiguous();
}

// (N, 1) float64 labels back where the inputs came from, in their floating dtype.
torch::Tensor like_inputs(const torch::Tensor& y, const torch::Tensor& x) {
  return y.to(x.device(), x.is_floating_point() ? x.scalar_type() : torch::kFloat64);
}

// A function that no torch op computes, evaluated row by row in double precision.
TargetFunction rowwise(std::string name, int64_t n_var, std::function<double(const double*)> g) {
  return [name = std::move(name), n_var, g = std::move(g)](const torch::Tensor& x) {
    const auto in = cpu_float64_inputs(x, name, n_var);
    auto out = torch::empty({in.size(0), 1}, in.options());
    const double* row = in.data_ptr<double>();
    double* y = out.data_ptr<double>();
    for (int64_t i = 0; i < in.size(0); ++i)
      y[i] = g(row + i * n_var);
    return like_inputs(out, x);
  };
}

// A function of torch ops on the float64 columns of its inputs (N) -> (N).
TargetFunction columnwise(std::string name, int64_t n_var,
                          std::function<torch::Tensor(const torch::Tensor&)> g) {
  return [name = std::move(name), n_var, g = std::move(g)](const torch::Tensor& x) {
    const auto in = cpu_float64_inputs(x, name, n_var);
    return like_inputs(g(in).unsqueeze(1), x);
  };
}

// SciPy's lpmv(m, nu, x): the associated Legendre function of integer order m and real degree
// nu >= 0, with the Condon-Shortley phase (-1)^m, for -1 < x <= 1. Neither libstdc++ nor Boost has
// a real degree (std::assoc_legendre takes an unsigned one and omits the phase), so it is the
// hypergeometric series
//   P_nu^m(x) = (-1)^m (nu-m+1)...(nu+m) / (2^m m!) (1-x^2)^(m/2) 2F1(m-nu, m+nu+1; m+1; (1-x)/2),
// summed in long double. On the catalogue's domain (x >= -0.9) its argument stays <= 0.95, where
// the series converges geometrically; mpmath agrees to ~1e-16 there, while SciPy's own values
// are off by up to ~4e-12 relative near degrees close to an integer.
double lpmv(int m, double nu, double x) {
  const long double z = (1.0L - x) / 2;
  const long double a = m - static_cast<long double>(nu);
  const long double b = m + static_cast<long double>(nu) + 1;
  const long double c = m + 1;
  long double term = 1;
  long double sum = 1;
  for (int n = 0; n < 100000; ++n) {
    const long double ratio = (a + n) * (b + n) / ((c + n) * (n + 1)) * z;
    term *= ratio;
    sum += term;
    // Past the sign changes of (a + n) and once terms shrink, the rest is below the sum's last bit.
    if (term == 0 ||
        (n > nu - m && std::fabs(ratio) < 1 && std::fabs(term) <= 1e-20L * std::fabs(sum)))
      break;
  }
  long double prefactor = m % 2 ? -1 : 1;
  for (int k = 1 - m; k <= m; ++k)
    prefactor *= nu + k;
  for (int k = 1; k <= m; ++k)
    prefactor /= 2 * k;
  // (1 - x)(1 + x) rather than 1 - x^2: no cancellation as x nears 1.
  const long double sine = std::sqrt((1.0L - x) * (1.0L + x));
  for (int k = 0; k < m; ++k)
    prefactor *= sine;
  return static_cast<double>(prefactor * sum);
}

// The real part of SciPy's sph_harm(m, n, theta, phi) (theta azimuthal, phi polar):
//   sqrt((2n+1)/(4 pi) (n-m)!/(n+m)!) P_n^m(cos phi) cos(m theta), Condon-Shortley phase included.
// P_n^m comes from the usual recurrence in n started at P_m^m = (-1)^m (2m-1)!! sin^m phi, with sin
// phi computed directly: std::sph_legendre forms it as sqrt(1 - cos^2 phi), which loses relative
// accuracy near the poles (1e-9 at phi = 2.5e-4, where this agrees with SciPy to 1e-16).
double sph_harm_real(int m, int n, double theta, double phi) {
  const double cosine = std::cos(phi);
  const double sine = std::sin(phi);
  double p = 1; // P_m^m
  for (int i = 1; i <= m; ++i)
    p *= -(2 * i - 1) * sine;
  double previous = 0;
  for (int l = m + 1; l <= n; ++l) {
    const double next = ((2 * l - 1) * cosine * p - (l + m - 1) * previous) / (l - m);
    previous = p;
    p = next;
  }
  double ratio = 1; // (n-m)! / (n+m)!
  for (int i = n - m + 1; i <= n + m; ++i)
    ratio /= i;
  return std::sqrt((2 * n + 1) / (4 * kPi) * ratio) * p * std::cos(m * theta);
}

const char* const kSpecialSource = "KAN paper (arXiv:2404.19756), Table 1: special functions";

ReferenceFunction special(std::string name, std::string formula, std::vector<std::string> variables,
                          std::vector<GridRange> ranges, std::string notes,
                          std::function<double(double, double)> g) {
  ReferenceFunction f;
  f.name = std::move(name);
  f.n_var = 2;
  f.formula = std::move(formula);
  f.f = rowwise(f.name, 2, [g = std::move(g)](const double* x) { return g(x[0], x[1]); });
  f.ranges = std::move(ranges);
  f.group = "special";
  f.source = kSpecialSource;
  f.notes = std::move(notes);
  f.variables = std::move(variables);
  return f;
}

std::vector<ReferenceFunction> make_special_functions() {
  const std::string bessel_domain =
      "The paper gives no domain: order nu in [0, 3] (libstdc++ takes nu >= 0)";
  const std::string lpmv_notes =
      "SciPy's lpmv(m, v, x): integer order m, real degree v, Condon-Shortley phase (-1)^m "
      "included (std::assoc_legendre omits it and takes integer degrees only, so the catalogue "
      "sums the hypergeometric series). The paper gives no domain: degree in [0, 3]; x stops at "
      "-0.9 because x = -1 is a logarithmic singularity for non-integer degrees.";
  const std::string sph_harm_notes =
      "The real part of SciPy's sph_harm(m, n, theta, phi) (the paper keeps no imaginary part): "
      "theta is the azimuthal angle in [0, 2 pi], phi the polar angle in [0, pi], in that "
      "argument order; SciPy >= 1.15 spells it sph_harm_y(n, m, phi, theta). Condon-Shortley phase "
      "included, as in SciPy and std::sph_legendre.";
  std::vector<ReferenceFunction> functions{
      special("ellipj", "sn(u | m) (scipy.special.ellipj(u, m)[0])", {"u", "m"},
              {{-2.0, 2.0}, {0.0, 1.0}},
              "ellipj returns (sn, cn, dn, ph); the paper does not say which it fitted: sn, the "
              "first. m is the parameter (m = k^2; Boost's jacobi_sn takes the modulus k). The "
              "paper gives no domain: u in [-2, 2], m over its whole real range [0, 1].",
              [](double u, double m) { return boost::math::jacobi_sn(std::sqrt(m), u); }),
      special("ellipkinc", "F(phi | m) (scipy.special.ellipkinc(phi, m))", {"phi", "m"},
              {{-kPi / 2, kPi / 2}, {0.0, 0.9}},
              "The incomplete elliptic integral of the first kind in SciPy's parameter m = k^2 "
              "(std::ellint_1 takes the modulus k and the angle second). The paper gives no "
              "domain: phi in [-pi/2, pi/2], m in [0, 0.9], so m sin^2(phi) < 1 and F stays "
              "finite and away from its logarithmic blow-up at m = 1.",
              [](double phi, double m) { return std::ellint_1(std::sqrt(m), phi); }),
      special("ellipeinc", "E(phi | m) (scipy.special.ellipeinc(phi, m))", {"phi", "m"},
              {{-kPi / 2, kPi / 2}, {0.0, 0.9}},
              "The incomplete elliptic integral of the second kind in SciPy's parameter m = k^2 "
              "(std::ellint_2 takes the modulus k and the angle second). Domain as ellipkinc's.",
              [](double phi, double m) { return std::ellint_2(std::sqrt(m), phi); }),
      special("jv", "J_nu(x) (scipy.special.jv(nu, x))", {"nu", "x"}, {{0.0, 3.0}, {0.0, 10.0}},
              bessel_domain + " and x in [0, 10] (a few oscillations; J is complex for x < 0).",
              [](double nu, double x) { return std::cyl_bessel_j(nu, x); }),
      special("yv", "Y_nu(x) (scipy.special.yv(nu, x))", {"nu", "x"}, {{0.0, 3.0}, {1.0, 10.0}},
              bessel_domain + " and x in [1, 10]: Y diverges at x = 0 (Y_3(1) = -5.8).",
              [](double nu, double x) { return std::cyl_neumann(nu, x); }),
      special("kv", "K_nu(x) (scipy.special.kv(nu, x))", {"nu", "x"}, {{0.0, 3.0}, {1.0, 10.0}},
              bessel_domain + " and x in [1, 10]: K diverges at x = 0 (K_3(1) = 7.1).",
              [](double nu, double x) { return std::cyl_bessel_k(nu, x); }),
      special("iv", "I_nu(x) (scipy.special.iv(nu, x))", {"nu", "x"}, {{0.0, 3.0}, {0.0, 5.0}},
              bessel_domain + " and x in [0, 5]: I grows like e^x (I_0(5) = 27).",
              [](double nu, double x) { return std::cyl_bessel_i(nu, x); }),
  };
  for (int m = 0; m <= 2; ++m) {
    functions.push_back(special("lpmv_" + std::to_string(m),
                                "P_nu^" + std::to_string(m) + "(x) (scipy.special.lpmv(" +
                                    std::to_string(m) + ", nu, x))",
                                {"nu", "x"}, {{0.0, 3.0}, {-0.9, 1.0}}, lpmv_notes,
                                [m](double nu, double x) { return lpmv(m, nu, x); }));
  }
  // The paper's order: (m, n) = (0, 1), (1, 1), (0, 2), (1, 2), (2, 2).
  for (const auto& [m, n] :
       std::vector<std::pair<int, int>>{{0, 1}, {1, 1}, {0, 2}, {1, 2}, {2, 2}}) {
    const auto mn = std::to_string(m) + ", " + std::to_string(n);
    functions.push_back(special(
        "sph_harm_" + std::to_string(m) + std::to_string(n),
        "Re Y_" + std::to_string(n) + "^" + std::to_string(m) +
            "(theta, phi) (Re scipy.special.sph_harm(" + mn + ", theta, phi))",
        {"theta", "phi"}, {{0.0, 2 * kPi}, {0.0, kPi}}, sph_harm_notes,
        [m = m, n = n](double theta, double phi) { return sph_harm_real(m, n, theta, phi); }));
  }
  return functions;
}

const char* const kFeynmanSource =
    "KAN paper (arXiv:2404.19756), Table 2: Feynman dataset (dimensionless form); pykan 0.2.8 "
    "kan/feynman.py ";

struct Feynman {
  const char* equation; // the paper's label
  const char* pykan;    // get_feynman_dataset's name of the dimensional equation
  const char* formula;  // the paper's dimensionless formula
  std::vector<std::string> variables;
  std::vector<GridRange> ranges; // the domain's choice is explained in notes
  const char* notes;
  std::function<torch::Tensor(const torch::Tensor&)> g;
};

ReferenceFunction feynman(Feynman e) {
  ReferenceFunction f;
  f.name = std::string("feynman_") + e.equation;
  f.n_var = static_cast<int64_t>(e.variables.size());
  f.formula = e.formula;
  f.f = columnwise(f.name, f.n_var, std::move(e.g));
  f.ranges = std::move(e.ranges);
  f.group = "feynman";
  f.source = std::string(kFeynmanSource) + "'" + e.pykan + "'";
  f.notes = e.notes;
  f.variables = std::move(e.variables);
  return f;
}

// Column i of (N, n) inputs.
torch::Tensor col(const torch::Tensor& x, int64_t i) {
  return x.select(1, i);
}

std::vector<ReferenceFunction> make_feynman_functions() {
  const double two_pi = 2 * kPi;
  std::vector<Feynman> table{
      {"I.6.2",
       "I.6.20",
       "exp(-theta^2 / (2 sigma^2)) / sqrt(2 pi sigma^2)",
       {"theta", "sigma"},
       {{-1.0, 1.0}, {0.5, 2.0}},
       "Domain: pykan's ranges for theta and sigma.",
       [](const torch::Tensor& x) {
         const auto s2 = col(x, 1).square();
         return torch::exp(-col(x, 0).square() / (2 * s2)) / torch::sqrt(2 * kPi * s2);
       }},
      {"I.6.2b",
       "I.6.20b",
       "exp(-(theta - theta1)^2 / (2 sigma^2)) / sqrt(2 pi sigma^2)",
       {"theta", "theta1", "sigma"},
       {{-1.5, 1.5}, {-1.5, 1.5}, {0.5, 2.0}},
       "Domain: pykan's ranges for theta, theta1 and sigma.",
       [](const torch::Tensor& x) {
         const auto s2 = col(x, 2).square();
         return torch::exp(-(col(x, 0) - col(x, 1)).square() / (2 * s2)) /
                torch::sqrt(2 * kPi * s2);
       }},
      {"I.9.18",
       "I.9.18",
       "a / ((b - 1)^2 + (c - d)^2 + (e - f)^2)",
       {"a", "b", "c", "d", "e", "f"},
       {{-1.0, 1.0}, {-1.0, -0.5}, {-1.0, -0.5}, {0.5, 1.0}, {-1.0, -0.5}, {0.5, 1.0}},
       "a = G m1 m2 / x1^2 and the other coordinates in units of x1 (= 1). Domain: pykan's, which "
       "keeps each coordinate pair apart (one in [-1, -0.5], the other in [0.5, 1]), so the "
       "distance never vanishes; a in pykan's [-1, 1] of G, m1, m2.",
       [](const torch::Tensor& x) {
         return col(x, 0) / ((col(x, 1) - 1).square() + (col(x, 2) - col(x, 3)).square() +
                             (col(x, 4) - col(x, 5)).square());
       }},
      {"I.12.11",
       "I.12.11",
       "1 + a sin(theta)",
       {"a", "theta"},
       {{-1.0, 1.0}, {0.0, two_pi}},
       "a = B v / E_f. Domain: a in [-1, 1] (pykan's B, v, E_f range), theta in pykan's [0, 2 pi].",
       [](const torch::Tensor& x) { return 1 + col(x, 0) * torch::sin(col(x, 1)); }},
      {"I.13.12",
       "I.13.12",
       "a (1/b - 1)",
       {"a", "b"},
       {{0.0, 1.0}, {0.5, 2.0}},
       "a = G m1 m2 / r1, b = r2 / r1. Domain: a in pykan's [0, 1] of G, m1, m2; b in pykan's "
       "[0.5, 2] of r1, r2.",
       [](const torch::Tensor& x) { return col(x, 0) * (1 / col(x, 1) - 1); }},
      {"I.15.3x",
       "I.15.3x",
       "(1 - a) / sqrt(1 - b^2)",
       {"a", "b"},
       {{-1.0, 1.0}, {-0.9, 0.9}},
       "a = u t / x, b = u / c. Domain: a in [-1, 1]; |b| <= 0.9 (pykan's |v| <= 0.9 of its "
       "other Lorentz factors) keeps the root away from 0.",
       [](const torch::Tensor& x) {
         return (1 - col(x, 0)) / torch::sqrt(1 - col(x, 1).square());
       }},
      {"I.16.6",
       "I.16.6",
       "(a + b) / (1 + a b)",
       {"a", "b"},
       {{-0.8, 0.8}, {-0.8, 0.8}},
       "a = u / c, b = v / c. Domain: pykan's [-0.8, 0.8] of u and v (with c >= 1); the paper's "
       "text draws u, v from (-1, 1), whose corners (1, -1) and (-1, 1) are 0/0 and x/0. (pykan "
       "0.2.8's own I.16.6 multiplies u v in the numerator, a slip; the paper's formula is used.)",
       [](const torch::Tensor& x) {
         return (col(x, 0) + col(x, 1)) / (1 + col(x, 0) * col(x, 1));
       }},
      {"I.18.4",
       "I.18.4",
       "(1 + a b) / (1 + a)",
       {"a", "b"},
       {{0.5, 2.0}, {-1.0, 1.0}},
       "a = m2 / m1, b = r2 / r1 (pykan's first I.18.4, the centre of mass; a second entry of the "
       "same name follows it there). Domain: a in [0.5, 2], the ratios of pykan's masses in "
       "[0.5, 1]; b in [-1, 1], pykan's range of r1, r2.",
       [](const torch::Tensor& x) { return (1 + col(x, 0) * col(x, 1)) / (1 + col(x, 0)); }},
      {"I.26.2",
       "I.26.2",
       "arcsin(n sin(theta2))",
       {"n", "theta2"},
       {{0.0, 0.99}, {0.0, two_pi}},
       "Domain: pykan's ranges of n and theta2 (n < 1 keeps arcsin real).",
       [](const torch::Tensor& x) { return torch::asin(col(x, 0) * torch::sin(col(x, 1))); }},
      {"I.27.6",
       "I.27.6",
       "1 / (1 + a b)",
       {"a", "b"},
       {{0.5, 2.0}, {0.25, 2.0}},
       "a = n, b = d1 / d2. Domain: pykan's [0.5, 2] of n; b's range is the ratios of pykan's d1 "
       "in [0.5, 2] and d2 in [1, 2].",
       [](const torch::Tensor& x) { return 1 / (1 + col(x, 0) * col(x, 1)); }},
      {"I.29.16",
       "I.29.16",
       "sqrt(1 + a^2 - 2 a cos(theta1 - theta2))",
       {"a", "theta1", "theta2"},
       {{-0.9, 0.9}, {0.0, two_pi}, {0.0, two_pi}},
       "a = x2 / x1. Domain: theta1, theta2 in pykan's [0, 2 pi]; |a| <= 0.9 keeps the root's "
       "argument >= 0.01 (at a = 1, theta1 = theta2 it cancels to 0 and can round below it).",
       [](const torch::Tensor& x) {
         const auto a = col(x, 0);
         return torch::sqrt(1 + a.square() - 2 * a * torch::cos(col(x, 1) - col(x, 2)));
       }},
      {"I.30.3",
       "I.30.3",
       "sin^2(n theta / 2) / sin^2(theta / 2)",
       {"n", "theta"},
       {{0.0, 4.0}, {0.4 * kPi, 1.6 * kPi}},
       "Domain: pykan's ranges of n and theta.",
       [](const torch::Tensor& x) {
         return torch::sin(col(x, 0) * col(x, 1) / 2).square() / torch::sin(col(x, 1) / 2).square();
       }},
      {"I.30.5",
       "I.30.5",
       "arcsin(a / n)",
       {"a", "n"},
       {{-1.0, 1.0}, {1.0, 1.5}},
       "a = lambda / d. Domain: a in [-1, 1] (pykan's lambda range), n in pykan's [1, 1.5], so "
       "|a / n| <= 1.",
       [](const torch::Tensor& x) { return torch::asin(col(x, 0) / col(x, 1)); }},
      {"I.37.4",
       "I.37.4",
       "1 + a + 2 sqrt(a) cos(delta)",
       {"a", "delta"},
       {{0.1, 1.0}, {0.0, two_pi}},
       "a = I2 / I1. Domain: a in pykan's [0.1, 1] of the intensities, delta in its [0, 2 pi].",
       [](const torch::Tensor& x) {
         return 1 + col(x, 0) + 2 * torch::sqrt(col(x, 0)) * torch::cos(col(x, 1));
       }},
      {"I.40.1",
       "I.40.1",
       "n0 exp(-a)",
       {"n0", "a"},
       {{0.0, 1.0}, {-1.0, 1.0}},
       "a = m g x / (k_b T). Domain: n0 in pykan's [0, 1]; a in [-1, 1], the range of pykan's "
       "m g x over its k_b T >= 1.",
       [](const torch::Tensor& x) { return col(x, 0) * torch::exp(-col(x, 1)); }},
      {"I.44.4",
       "I.44.4",
       "n ln(a)",
       {"n", "a"},
       {{0.0, 1.0}, {0.5, 2.0}},
       "a = V2 / V1. Domain: n in pykan's [0, 1]; a in pykan's [0.5, 2] of the volumes.",
       [](const torch::Tensor& x) { return col(x, 0) * torch::log(col(x, 1)); }},
      {"I.50.26",
       "I.50.26",
       "cos(a) + alpha cos^2(a)",
       {"a", "alpha"},
       {{0.0, two_pi}, {0.0, 1.0}},
       "a = omega t. Domain: a in [0, 2 pi] (pykan's omega in [0, 2 pi], t in [0, 1]); alpha in "
       "its [0, 1].",
       [](const torch::Tensor& x) {
         const auto c = torch::cos(col(x, 0));
         return c + col(x, 1) * c.square();
       }},
      {"II.2.42",
       "II.2.42",
       "(a - 1) b",
       {"a", "b"},
       {{0.5, 2.0}, {0.0, 1.0}},
       "a = T2 / T1, b = kappa T1 A / d. Domain: chosen (pykan's temperatures in [0, 1] make T2 / "
       "T1 unbounded): a in [0.5, 2], b in [0, 1].",
       [](const torch::Tensor& x) { return (col(x, 0) - 1) * col(x, 1); }},
      {"II.6.15a",
       "II.6.15a",
       "c sqrt(a^2 + b^2) / (4 pi)",
       {"a", "b", "c"},
       {{0.0, 1.0}, {0.0, 1.0}, {0.0, 1.0}},
       "a = x / r, b = y / r, c = 3 p_d z / (eps r^4). Domain: pykan's [0, 1] of x, y, z and p_d.",
       [](const torch::Tensor& x) {
         return col(x, 2) * torch::sqrt(col(x, 0).square() + col(x, 1).square()) / (4 * kPi);
       }},
      {"II.11.7",
       "II.11.17",
       "n0 (1 + a cos(theta))",
       {"n0", "a", "theta"},
       {{0.0, 1.0}, {-1.0, 1.0}, {0.0, two_pi}},
       "The paper's label II.11.7 is pykan's (and AI Feynman's) II.11.17. a = p_d E_f / (k_b T). "
       "Domain: n0 and theta pykan's; a in [-1, 1], pykan's p_d and E_f range.",
       [](const torch::Tensor& x) { return col(x, 0) * (1 + col(x, 1) * torch::cos(col(x, 2))); }},
      {"II.11.27",
       "II.11.27",
       "n alpha / (1 - n alpha / 3)",
       {"n", "alpha"},
       {{0.0, 1.0}, {0.0, 2.0}},
       "Domain: pykan's ranges of n and alpha (n alpha <= 2 < 3).",
       [](const torch::Tensor& x) {
         const auto na = col(x, 0) * col(x, 1);
         return na / (1 - na / 3);
       }},
      {"II.35.18",
       "II.35.18",
       "n0 / (exp(a) + exp(-a))",
       {"n0", "a"},
       {{0.0, 1.0}, {0.0, 1.0}},
       "a = mu B / (k_b T). Domain: n0 in pykan's [0, 1]; a in [0, 1], pykan's range of mu and B.",
       [](const torch::Tensor& x) {
         return col(x, 0) / (torch::exp(col(x, 1)) + torch::exp(-col(x, 1)));
       }},
      {"II.36.38",
       "II.36.38",
       "a + alpha b",
       {"a", "alpha", "b"},
       {{0.0, 1.0}, {0.0, 1.0}, {0.0, 1.0}},
       "a = mu B / (k_b T), b = mu M / (eps c^2 k_b T). Domain: [0, 1] for each, pykan's range "
       "of mu, B, alpha and M.",
       [](const torch::Tensor& x) { return col(x, 0) + col(x, 1) * col(x, 2); }},
      {"II.38.3",
       "II.38.3",
       "a / b",
       {"a", "b"},
       {{0.0, 1.0}, {0.5, 2.0}},
       "a = Y A x, b = d. Domain: pykan's [0, 1] of Y, A, x and [0.5, 2] of d.",
       [](const torch::Tensor& x) { return col(x, 0) / col(x, 1); }},
      {"III.9.52",
       "III.9.52",
       "a sin^2((b - c) / 2) / ((b - c) / 2)^2",
       {"a", "b", "c"},
       {{0.0, 1.0}, {0.0, kPi}, {0.0, kPi}},
       "a = p_d E_f t / hbar, b = omega t, c = omega0 t. Domain: a in pykan's [0, 1]; b, c in "
       "[0, pi] (pykan's omega, omega0 in [0, pi], t in [0, 1]). At b = c the removable "
       "singularity takes its limit a.",
       [](const torch::Tensor& x) {
         const auto h = (col(x, 1) - col(x, 2)) / 2;
         const auto sinc = torch::where(h == 0, torch::ones_like(h), torch::sin(h) / h);
         return col(x, 0) * sinc.square();
       }},
      {"III.10.19",
       "III.10.19",
       "sqrt(1 + a^2 + b^2)",
       {"a", "b"},
       {{0.0, 1.0}, {0.0, 1.0}},
       "a = B_y / B_x, b = B_z / B_x. Domain: [0, 1], pykan's range of the field components.",
       [](const torch::Tensor& x) {
         return torch::sqrt(1 + col(x, 0).square() + col(x, 1).square());
       }},
      {"III.17.37",
       "III.17.37",
       "beta (1 + alpha cos(theta))",
       {"alpha", "beta", "theta"},
       {{0.0, 1.0}, {0.0, 1.0}, {0.0, two_pi}},
       "Inputs in the paper's order alpha, beta, theta. Domain: pykan's ranges.",
       [](const torch::Tensor& x) { return col(x, 1) * (1 + col(x, 0) * torch::cos(col(x, 2))); }},
  };
  std::vector<ReferenceFunction> functions;
  for (auto& e : table)
    functions.push_back(feynman(std::move(e)));
  return functions;
}

} // namespace

const std::vector<ReferenceFunction>& special_functions() {
  static const std::vector<ReferenceFunction> functions = make_special_functions();
  return functions;
}

const std::vector<ReferenceFunction>& feynman_functions() {
  static const std::vector<ReferenceFunction> functions = make_feynman_functions();
  return functions;
}

} // namespace kan
