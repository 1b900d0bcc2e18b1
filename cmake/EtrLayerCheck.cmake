# etr_layer_link_check(<layer>): the check that keeps etr's layers honest (docs/architecture.md,
# "Layers"). A program, <layer>_link_check, is linked from an empty main and the whole of the
# layer's static library (-Wl,--whole-archive: every object, called or not) with nothing
# else but the layer's own link interface, i.e. the layers below it and their third-party
# libraries. A function of the layer that calls into a layer above it (or into a library it
# does not link) leaves that symbol undefined and the link, hence the build, fails, naming
# the symbol and the object that calls it. Used by the top-level CMakeLists.txt for each
# layer and etr_launcher, and by the test project of tests/layers/ to show the failure.
set(ETR_LAYER_CHECK_MAIN ${CMAKE_CURRENT_LIST_DIR}/layer_check_main.cc)

function(etr_layer_link_check layer)
  set(check ${layer}_link_check)
  add_executable(${check} ${ETR_LAYER_CHECK_MAIN})
  target_link_libraries(${check} PRIVATE $<LINK_LIBRARY:WHOLE_ARCHIVE,${layer}>)
  set_target_properties(${check} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/layer_checks)
endfunction()
