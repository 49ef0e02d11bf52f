# An installed kanbenchConfig.cmake lets another project find_package(kanbench) and link kan::kan,
# kan::distributed (where built), kan::train_records, kan::diagnostics, kan::results, kan::reports and kan::io (tests/consumer builds such a project against the
# installed tree). The warnings target stays inside this build.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(kan_installed_libraries kan kan_train_records kan_io kan_diagnostics kan_results kan_reports)
if(TARGET kan_distributed)
  list(APPEND kan_installed_libraries kan_distributed)
endif()
install(TARGETS ${kan_installed_libraries} EXPORT kanbenchTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/kan/include/kan ${PROJECT_SOURCE_DIR}/kan/records/include/kan
                  ${PROJECT_SOURCE_DIR}/io/include/kan
                  ${PROJECT_SOURCE_DIR}/diagnostics/include/kan
                  ${PROJECT_SOURCE_DIR}/results/include/kan
                  ${PROJECT_SOURCE_DIR}/reports/include/kan
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET kanbench)
  install(TARGETS kanbench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT kanbenchTargets NAMESPACE kan:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kanbench)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kanbenchConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kanbenchConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kanbench)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kanbenchConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kanbenchConfig.cmake
              ${PROJECT_BINARY_DIR}/kanbenchConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kanbench)
