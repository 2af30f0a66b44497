// kylin's version (CMakeLists.txt reads it from here for the package's version).
#pragma once

#include <string_view>

namespace kylin {

inline constexpr std::string_view version = "0.1.0";

}  // namespace kylin
