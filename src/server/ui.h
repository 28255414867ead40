// server/ui.h: the web page (ui/: a chat and a live dashboard), compiled into the binary by
// cmake/embed_ui.cmake so it is served offline with no files to install.
#pragma once

#include <cstddef>
#include <string_view>

namespace paddock::server {

struct UiAsset {
  const char* path;  // "/", "/ui/app.js", ...
  const char* content_type;
  const unsigned char* data;
  size_t size;
};
// The asset served at `path`, or null.
const UiAsset* FindUiAsset(std::string_view path);

}  // namespace paddock::server
