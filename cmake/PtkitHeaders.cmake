# ptkit_headers(TARGET DIR): TARGET's headers are those of the source folder DIR (decoder,
# record, record/swpt, ...), included as "DIR/name.h". The include path this adds to TARGET
# (PUBLIC: and to what links it) shows DIR and nothing else of the source tree, through a
# symbolic link under the build tree, so a library can include only the headers of the
# libraries it links: the build enforces the layering (the decoder never includes record/,
# the common library neither).
function(ptkit_headers target dir)
  string(REPLACE "/" "_" name ${dir})
  set(root ${PROJECT_BINARY_DIR}/headers/${name})
  get_filename_component(parent ${root}/${dir} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(NOT IS_SYMLINK ${root}/${dir})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${root}/${dir} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC ${root})
endfunction()
