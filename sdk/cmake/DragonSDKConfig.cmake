# DragonSDK CMake package.
#
#   find_package(DragonSDK 1.0 REQUIRED)
#   dragon_add_plugin(my_plugin SOURCES src/kernels.cc)
#
# builds libmy_plugin.so as a MODULE library: C++17, hidden visibility, a
# version script exporting only dragon_plugin_entry_v1, and
# -Wl,--no-undefined so the plugin can never import a core symbol.
get_filename_component(_dg_sdk_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(DragonSDK_INCLUDE_DIR "${_dg_sdk_root}/include")
set(DragonSDK_VERSION_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/plugin.map")

if(NOT TARGET Dragon::SDK)
  add_library(Dragon::SDK INTERFACE IMPORTED)
  set_target_properties(Dragon::SDK PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${DragonSDK_INCLUDE_DIR}")
endif()

function(dragon_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_NAME" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "dragon_add_plugin(${name}): give SOURCES")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE Dragon::SDK)
  target_compile_features(${name} PRIVATE cxx_std_17)
  set_target_properties(${name} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    PREFIX "lib")
  if(ARG_OUTPUT_NAME)
    set_target_properties(${name} PROPERTIES OUTPUT_NAME ${ARG_OUTPUT_NAME})
  endif()
  if(NOT APPLE AND NOT WIN32)
    target_link_options(${name} PRIVATE
      "LINKER:--no-undefined"
      "LINKER:--version-script=${DragonSDK_VERSION_SCRIPT}")
  endif()
endfunction()
