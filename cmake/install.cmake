# install.cmake -- what `cmake --install` puts where: the shared and static
# libraries, the public header, the tools, a pkg-config file (fusejit.pc)
# and a CMake package (fusejitConfig.cmake + version file, targets exported
# as fusejit::fusejit and fusejit::fusejit_static).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS fusejit fusejit_static EXPORT fusejitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS fusejit-opt fusejit-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES include/fusejit/fusejit.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fusejit)

set(FJ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fusejit)
install(EXPORT fusejitTargets NAMESPACE fusejit:: DESTINATION ${FJ_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fusejitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fusejitConfig.cmake INSTALL_DESTINATION ${FJ_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fusejitConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fusejitConfig.cmake ${PROJECT_BINARY_DIR}/fusejitConfigVersion.cmake
  DESTINATION ${FJ_CMAKE_DIR})

# pkg-config: paths relative to the .pc file, so `cmake --install --prefix P` works.
file(RELATIVE_PATH FJ_PC_TO_PREFIX /P/${CMAKE_INSTALL_LIBDIR}/pkgconfig /P)
configure_file(${PROJECT_SOURCE_DIR}/cmake/fusejit.pc.in ${PROJECT_BINARY_DIR}/fusejit.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fusejit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
