# libFuzzer targets of etr's readers (README.md, "Fuzzing"). Built only in a build of its
# own, configured with clang and -DETR_FUZZ=ON: the top-level CMakeLists.txt then includes
# this file (in its scope, so that the .proto paths are the repository's) and builds
# nothing else: scripts/fuzz.sh and scripts/test.sh use build-fuzz/.
#
#   fuzz_config       parse_config + apply_overrides + resolve (runtime/config/)
#   fuzz_manifest     read_manifest and check_manifest_sense (checkpoint/manifest.*)
#   fuzz_token_file   TokenFile: etr, llm.c, nanoGPT; header, size, checksum, tokens
#                     (examples/data/token_file.*, token_file_format.*)
#   fuzz_safetensors  SafetensorsFile: header JSON, offsets, dtypes (checkpoint/safetensors*)
#
# Only the sources these readers need are compiled, into etr_fuzz_readers, instrumented
# for coverage (-fsanitize=fuzzer-no-link) and checked by ASan and UBSan; the targets link
# libFuzzer's main. Each target runs under ctest (label "fuzz") for ETR_FUZZ_SECONDS on a
# copy of its seed corpus tests/fuzz/corpus/<target>/ and passes when nothing was found.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "ETR_FUZZ needs clang (libFuzzer): configure with CC=clang CXX=clang++")
endif()
set(ETR_FUZZ_SECONDS 45 CACHE STRING "Seconds each fuzz target runs under ctest")

find_package(Protobuf REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
list(APPEND CMAKE_MODULE_PATH ${CMAKE_SOURCE_DIR}/cmake)
find_package(XXHash REQUIRED)

set(ETR_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer -g1)
set(ETR_FUZZ_SOURCES
  runtime/bytes.cc
  runtime/dtype.cc
  runtime/log.cc
  runtime/env.cc
  runtime/error_text.cc
  runtime/config/config_fields.cc
  runtime/config/train_config.cc
  runtime/config/pipeline_settings.cc
  runtime/config/settings.cc
  examples/gpt/model_presets.cc
  checkpoint/checksum.cc
  checkpoint/durable_file.cc
  checkpoint/extent_runs.cc
  checkpoint/mapping_cache.cc
  checkpoint/manifest.cc
  checkpoint/manifest_sense.cc
  checkpoint/safetensors.cc
  checkpoint/safetensors_types.cc
  checkpoint/safetensors_writer.cc
  examples/data/token_file.cc
  examples/data/token_file_format.cc)
list(TRANSFORM ETR_FUZZ_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/)
add_library(etr_fuzz_readers STATIC ${ETR_FUZZ_SOURCES})
protobuf_generate(TARGET etr_fuzz_readers LANGUAGE cpp
                  PROTOS runtime/config/etr_config.proto checkpoint/manifest.proto
                  PROTOC_OUT_DIR ${CMAKE_BINARY_DIR})
target_include_directories(etr_fuzz_readers PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
target_compile_options(etr_fuzz_readers PUBLIC ${ETR_FUZZ_FLAGS}
                       PRIVATE -fsanitize=fuzzer-no-link -Wall -Wextra -Werror
                               -fmacro-prefix-map=${CMAKE_SOURCE_DIR}/=)
target_link_options(etr_fuzz_readers PUBLIC -fsanitize=address,undefined)
target_link_libraries(etr_fuzz_readers PUBLIC protobuf::libprotobuf XXHash::xxhash
                      PRIVATE nlohmann_json::nlohmann_json)

set(ETR_FUZZ_TARGETS fuzz_config fuzz_manifest fuzz_token_file fuzz_safetensors)
enable_testing()
foreach(target IN LISTS ETR_FUZZ_TARGETS)
  add_executable(${target} ${CMAKE_CURRENT_LIST_DIR}/${target}.cc)
  target_compile_options(${target} PRIVATE -fsanitize=fuzzer -Wall -Wextra -Werror)
  target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${target} PRIVATE etr_fuzz_readers)
  # run_fuzz_target.sh copies the seeds to a work dir (libFuzzer adds to its corpus) and
  # runs the target for ETR_FUZZ_SECONDS; a crash, leak, timeout or OOM fails the test.
  add_test(NAME ${target}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_fuzz_target.sh $<TARGET_FILE:${target}>
                   ${CMAKE_CURRENT_LIST_DIR}/corpus/${target}
                   ${CMAKE_BINARY_DIR}/fuzz-work/${target} ${ETR_FUZZ_SECONDS})
  math(EXPR timeout "${ETR_FUZZ_SECONDS} + 120")
  set_tests_properties(${target} PROPERTIES LABELS "fuzz" TIMEOUT ${timeout})
endforeach()
