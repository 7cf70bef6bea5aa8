# Helpers shared by every folder's CMakeLists.txt.
#
#   distckpt_library(NAME SRCS ... DEPS ... [TESTONLY])   static library distckpt_<NAME>;
#       one defined under reference/ (and not TESTONLY) is a layer of the installed
#       package: exported as distckpt::<NAME> and linked by distckpt::distckpt
#       (cmake/package.cmake)
#   distckpt_test(NAME SRCS ... DEPS ... LABELS ...)  GoogleTest binary, one ctest per TEST
#   distckpt_mpi_test(NAME NP n SRCS ... DEPS ... ) GoogleTest binary run under mpirun -np n

function(distckpt_library name)
  cmake_parse_arguments(ARG "TESTONLY" "" "SRCS;DEPS" ${ARGN})
  add_library(distckpt_${name} STATIC ${ARG_SRCS})
  target_include_directories(distckpt_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/reference>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/distckpt>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(distckpt_${name} PUBLIC ${ARG_DEPS})
  string(FIND "${CMAKE_CURRENT_SOURCE_DIR}/" "${PROJECT_SOURCE_DIR}/reference/" _at)
  if(_at EQUAL 0 AND NOT ARG_TESTONLY)
    set_target_properties(distckpt_${name} PROPERTIES EXPORT_NAME ${name})
    set_property(GLOBAL APPEND PROPERTY DISTCKPT_LAYERS distckpt_${name})
  endif()
endfunction()

function(distckpt_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  # CMake 3.25's gtest_discover_tests flattens PROPERTIES into one list, so
  # "scenario;slow" would become LABELS scenario plus a property named slow:
  # discovered tests take one label.
  list(LENGTH ARG_LABELS n_labels)
  if(n_labels GREATER 1)
    message(FATAL_ERROR "distckpt_test(${name}): one label (got ${ARG_LABELS})")
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       DISCOVERY_TIMEOUT 60 DISCOVERY_MODE PRE_TEST)
endfunction()

# MPI GoogleTest binaries use the project's MPI main (reference/comm/mpi_test_main.cc),
# which all-reduces the verdict so every rank agrees on pass/fail.
set(DISTCKPT_MPIRUN_FLAGS --oversubscribe)
execute_process(COMMAND id -u OUTPUT_VARIABLE _distckpt_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_distckpt_uid STREQUAL "0")
  list(APPEND DISTCKPT_MPIRUN_FLAGS --allow-run-as-root)
endif()
set(DISTCKPT_MPIRUN_FLAGS ${DISTCKPT_MPIRUN_FLAGS} CACHE INTERNAL "")

function(distckpt_mpi_test name)
  cmake_parse_arguments(ARG "" "NP;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT DISTCKPT_WITH_MPI)
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SRCS} ${PROJECT_SOURCE_DIR}/reference/comm/mpi_test_main.cc)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} distckpt_comm GTest::gmock GTest::gtest)
  add_test(NAME ${name}_np${ARG_NP}
           COMMAND ${MPIEXEC_EXECUTABLE} ${DISTCKPT_MPIRUN_FLAGS} -np ${ARG_NP}
                   $<TARGET_FILE:${name}>)
  set_tests_properties(${name}_np${ARG_NP} PROPERTIES LABELS "mpi;${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
endfunction()

# GoogleTest binaries that need a CUDA device: label gpu, one ctest each. Built
# whenever the library is (they compile without CUDA); with no device they
# print why and exit 77, which ctest reports as skipped, never passed.
#   distckpt_gpu_test(NAME SRCS ... DEPS ... [NP n] [SIMULATED])
#     NP: under mpirun -np n. SIMULATED: also a ctest NAME_simulated (label
#     unit) on two simulated devices (DISTCKPT_SIMULATE_CUDA=2, core/device.h),
#     so machines without a GPU run the device code paths too.
function(distckpt_gpu_test name)
  cmake_parse_arguments(ARG "SIMULATED" "NP;TIMEOUT" "SRCS;DEPS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(ARG_NP)
    if(NOT DISTCKPT_WITH_MPI)
      return()
    endif()
    add_executable(${name} ${ARG_SRCS} ${PROJECT_SOURCE_DIR}/reference/comm/mpi_test_main.cc)
    target_compile_definitions(${name} PRIVATE DISTCKPT_GPU_TEST=1)
    target_link_libraries(${name} PRIVATE ${ARG_DEPS} distckpt_comm GTest::gmock GTest::gtest)
    set(_command ${MPIEXEC_EXECUTABLE} ${DISTCKPT_MPIRUN_FLAGS} -np ${ARG_NP}
                 $<TARGET_FILE:${name}>)
    set(_test ${name}_np${ARG_NP})
    set(_labels "gpu;mpi")
  else()
    add_executable(${name} ${ARG_SRCS} ${PROJECT_SOURCE_DIR}/reference/core/gpu_test_main.cc)
    target_link_libraries(${name} PRIVATE ${ARG_DEPS} distckpt_core GTest::gmock GTest::gtest)
    set(_command $<TARGET_FILE:${name}>)
    set(_test ${name})
    set(_labels gpu)
  endif()
  add_test(NAME ${_test} COMMAND ${_command})
  set(_env "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
  set_tests_properties(${_test} PROPERTIES LABELS "${_labels}" TIMEOUT ${ARG_TIMEOUT}
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
  if(ARG_SIMULATED)
    add_test(NAME ${_test}_simulated COMMAND ${_command})
    string(REPLACE "gpu" "unit" _labels "${_labels}")
    set_tests_properties(${_test}_simulated PROPERTIES LABELS "${_labels}" TIMEOUT ${ARG_TIMEOUT}
                         ENVIRONMENT "${_env};DISTCKPT_SIMULATE_CUDA=2")
  endif()
endfunction()
