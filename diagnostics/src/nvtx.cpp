#include "kan/diagnostics/nvtx.h"

#include "kan/config.h"
#include "kan/nn/trace_scope.h"

#include <cstring>
#include <memory>
#include <string_view>

#ifdef KAN_HAS_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace kan::diagnostics {
namespace detail {
namespace {

thread_local NvtxScopeCounters t_counters;
thread_local std::vector<std::string> t_range_log;

void log_range_event(std::string event) {
  constexpr size_t kKept = 64;
  if (t_range_log.size() == kKept)
    t_range_log.erase(t_range_log.begin());
  t_range_log.push_back(std::move(event));
}

#ifdef KAN_HAS_NVTX

thread_local int t_scopes_depth = 0;                 // NvtxScopes alive on this thread
thread_local at::CallbackHandle t_scopes_handle = 0; // the outermost one's callback

// Created on first use; a null handle (no tool attached) is valid for every call below.
nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t handle = [] {
    nvtxDomainHandle_t d = nvtxDomainCreateA(kNvtxDomain);
    nvtxDomainNameCategoryA(d, static_cast<uint32_t>(NvtxCategory::kRange), "range");
    nvtxDomainNameCategoryA(d, static_cast<uint32_t>(NvtxCategory::kPhase), "phase");
    nvtxDomainNameCategoryA(d, static_cast<uint32_t>(NvtxCategory::kModule), "module");
    return d;
  }();
  return handle;
}

uint32_t color_of(NvtxCategory category) {
  switch (category) {
  case NvtxCategory::kRange:
    return 0xFF4C72B0; // blue
  case NvtxCategory::kPhase:
    return 0xFF55A868; // green
  case NvtxCategory::kModule:
    return 0xFFDD8452; // orange
  }
  return 0xFF8C8C8C;
}

void push(const char* name, NvtxCategory category, const int64_t* payload = nullptr) {
  nvtxEventAttributes_t attributes;
  std::memset(&attributes, 0, sizeof(attributes));
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.category = static_cast<uint32_t>(category);
  attributes.colorType = NVTX_COLOR_ARGB;
  attributes.color = color_of(category);
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name;
  if (payload != nullptr) {
    attributes.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    attributes.payload.llValue = *payload;
  }
  nvtxDomainRangePushEx(domain(), &attributes);
}

void pop() {
  nvtxDomainRangePop(domain());
}

#else // no NVTX3: nothing to push to

void push(const char* /*name*/, NvtxCategory /*category*/, const int64_t* /*payload*/ = nullptr) {}
void pop() {}

#endif // KAN_HAS_NVTX

// Marks a RecordFunction whose start callback pushed a range.
struct PushedRange : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> scope_start(const at::RecordFunction& fn) {
  ++t_counters.calls;
  auto range = nvtx_scope_range(fn.name());
  if (!range)
    return nullptr;
  push(range->first.c_str(), range->second);
  ++t_counters.pushed;
  return std::make_unique<PushedRange>();
}

void scope_end(const at::RecordFunction& /*fn*/, at::ObserverContext* context) {
  if (context == nullptr)
    return;
  pop();
  ++t_counters.popped;
}

} // namespace

at::RecordFunctionCallback nvtx_scopes_callback() {
  // USER_SCOPE only: ATen operations (FUNCTION scope) find no callback and pay nothing.
  return at::RecordFunctionCallback(scope_start, scope_end)
      .needsInputs(false)
      .needsOutputs(false)
      .needsIds(false)
      .scopes({at::RecordScope::USER_SCOPE});
}

NvtxScopeCounters nvtx_scope_counters() {
  return t_counters;
}

std::vector<std::string> nvtx_range_log() {
  return t_range_log;
}

std::optional<std::pair<std::string, NvtxCategory>> nvtx_scope_range(const char* record_name) {
  if (record_name == nullptr)
    return std::nullopt;
  const std::string_view name(record_name);
  if (name.substr(0, kPhaseScopePrefix.size()) == kPhaseScopePrefix)
    return std::make_pair(std::string(name.substr(kPhaseScopePrefix.size())), NvtxCategory::kPhase);
  if (name.substr(0, kModuleScopePrefix.size()) == kModuleScopePrefix)
    return std::make_pair(std::string(name.substr(kModuleScopePrefix.size())),
                          NvtxCategory::kModule);
  return std::nullopt;
}

} // namespace detail

bool nvtx_compiled_in() {
#ifdef KAN_HAS_NVTX
  return true;
#else
  return false;
#endif
}

#ifdef KAN_HAS_NVTX

NvtxRange::NvtxRange(const char* name) : pushed_(true) {
  detail::push(name, NvtxCategory::kRange);
  detail::log_range_event(name);
}

NvtxRange::NvtxRange(const char* name, int64_t payload) : pushed_(true) {
  detail::push(name, NvtxCategory::kRange, &payload);
  detail::log_range_event(std::string(name) + ":" + std::to_string(payload));
}

NvtxRange::~NvtxRange() {
  if (pushed_) {
    detail::pop();
    detail::log_range_event("pop");
  }
}

NvtxScopes::NvtxScopes() : installed_(true) {
  if (detail::t_scopes_depth++ == 0)
    detail::t_scopes_handle = at::addThreadLocalCallback(detail::nvtx_scopes_callback());
}

NvtxScopes::~NvtxScopes() {
  if (installed_ && --detail::t_scopes_depth == 0) {
    at::removeCallback(detail::t_scopes_handle);
    detail::t_scopes_handle = 0;
  }
}

bool NvtxScopes::active() {
  return detail::t_scopes_depth > 0;
}

#else // no NVTX3: the same API, doing nothing

NvtxRange::NvtxRange(const char* /*name*/) {}
NvtxRange::NvtxRange(const char* /*name*/, int64_t /*payload*/) {}
NvtxRange::~NvtxRange() = default;

NvtxScopes::NvtxScopes() = default;
NvtxScopes::~NvtxScopes() = default;

bool NvtxScopes::active() {
  return false;
}

#endif // KAN_HAS_NVTX

} // namespace kan::diagnostics
