# The installed package: the library's layers (every distckpt_library under
# reference/, registered in the DISTCKPT_LAYERS property), its headers under
# include/distckpt/ (folder structure kept: "engine/save.h" stays
# engine/save.h), the exported targets distckpt::<layer> and distckpt::distckpt
# (all layers), and distckptConfig.cmake + version file, so that
#   find_package(distckpt 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE distckpt::distckpt)
# works from an installed tree. docs/api.md says which headers are public.
# The consumer test (examples/consumer/install_test.sh) installs into a
# temporary prefix and builds examples/consumer against it.
include(CMakePackageConfigHelpers)

get_property(_distckpt_layers GLOBAL PROPERTY DISTCKPT_LAYERS)
add_library(distckpt_all INTERFACE)
set_target_properties(distckpt_all PROPERTIES EXPORT_NAME distckpt)
target_link_libraries(distckpt_all INTERFACE ${_distckpt_layers})
add_library(distckpt::distckpt ALIAS distckpt_all)
# `cmake --build B --target distckpt_libs` builds what `cmake --install B` installs.
add_custom_target(distckpt_libs)
add_dependencies(distckpt_libs ${_distckpt_layers})

install(TARGETS ${_distckpt_layers} distckpt_all EXPORT distckptTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/distckpt)

# Headers: every .h of the library but test helpers.
file(GLOB_RECURSE _distckpt_headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/reference
     ${PROJECT_SOURCE_DIR}/reference/*.h)
foreach(header ${_distckpt_headers})
  get_filename_component(_name ${header} NAME)
  if(_name MATCHES "^test|_test|^example_checkpoint\\.h$")
    continue()
  endif()
  get_filename_component(_dir ${header} DIRECTORY)
  install(FILES reference/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/distckpt/${_dir})
endforeach()

set(_distckpt_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/distckpt)
install(EXPORT distckptTargets NAMESPACE distckpt:: DESTINATION ${_distckpt_cmake_dir})
# distckptConfig.cmake finds what the exported targets link against.
set(DISTCKPT_CUDA_ROOT "")
if(DISTCKPT_WITH_CUDA)
  set(DISTCKPT_CUDA_ROOT "${CUDAToolkit_ROOT}")
endif()
configure_package_config_file(cmake/distckptConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/distckptConfig.cmake INSTALL_DESTINATION ${_distckpt_cmake_dir})
# 0.x: a minor version may break the API, so only the same minor version matches.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/distckptConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/distckptConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/distckptConfigVersion.cmake
        DESTINATION ${_distckpt_cmake_dir})

# The consumer test: install, build examples/consumer against the install, run it.
add_test(NAME package_consumer
         COMMAND ${PROJECT_SOURCE_DIR}/examples/consumer/install_test.sh ${CMAKE_BINARY_DIR})
set_tests_properties(package_consumer PROPERTIES LABELS unit TIMEOUT 600)
