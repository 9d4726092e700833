# zt_add_test(NAME SOURCES ... LIBS ...): a one-process GoogleTest binary.
# zt_add_mpi_test(NAME NP n [NP n ...] SOURCES ... LIBS ... [ARGS ...]): one
# binary run under mpirun with each process count, registered as NAME_npN.
# MPI test binaries use tests/mpi_main.cpp, which initialises MPI and reduces
# the result over all ranks.
set(ZT_MPIEXEC ${MPIEXEC_EXECUTABLE})
set(ZT_MPI_FLAGS --oversubscribe)
execute_process(COMMAND id -u OUTPUT_VARIABLE _zt_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_zt_uid STREQUAL "0")
  list(APPEND ZT_MPI_FLAGS --allow-run-as-root)
endif()

# Tests' time limits are stated for the release build; a sanitizer build runs
# the same work several times slower, and its presets scale every limit by
# ZT_TEST_TIMEOUT_SCALE (CMakePresets.json).
set(ZT_TEST_TIMEOUT_SCALE 1 CACHE STRING "factor applied to every test's TIMEOUT (sanitizer builds run slower)")
function(zt_set_test_timeout test seconds)
  math(EXPR _t "${seconds} * ${ZT_TEST_TIMEOUT_SCALE}")
  set_tests_properties(${test} PROPERTIES TIMEOUT ${_t})
endfunction()

function(zt_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main zt_warnings)
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2")
  if(T_TIMEOUT)
    zt_set_test_timeout(${name} ${T_TIMEOUT})
  endif()
endfunction()

function(zt_add_mpi_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "NP;SOURCES;LIBS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES} ${PROJECT_SOURCE_DIR}/tests/mpi_main.cpp)
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest MPI::MPI_CXX zt_warnings)
  foreach(np ${T_NP})
    add_test(NAME ${name}_np${np}
             COMMAND ${ZT_MPIEXEC} ${ZT_MPI_FLAGS} -np ${np} $<TARGET_FILE:${name}> ${T_ARGS})
    set_tests_properties(${name}_np${np} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" PROCESSORS ${np})
    if(T_TIMEOUT)
      zt_set_test_timeout(${name}_np${np} ${T_TIMEOUT})
    endif()
  endforeach()
endfunction()
