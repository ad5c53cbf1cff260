// The real libibverbs, reached only through dlvsym(RTLD_NEXT, name, version): under LD_PRELOAD
// the public names resolve back to liburoce, so forwarding through them would recurse. When a
// program links liburoce directly there is usually no libibverbs behind it and every pointer is
// null; callers then treat the object as not theirs to forward (ENOSYS).
#pragma once

#include <dlfcn.h>

namespace uroce::verbs {

inline void* real_symbol(const char* name, const char* version) {
  return dlvsym(RTLD_NEXT, name, version);
}

}  // namespace uroce::verbs

// The real implementation of `name` at symbol version `ver`, typed like the public declaration,
// or nullptr. Looked up once per call site.
#define UROCE_REAL(name, ver)                                                         \
  ([]() noexcept {                                                                    \
    static const auto fn =                                                            \
        reinterpret_cast<decltype(&::name)>(::uroce::verbs::real_symbol(#name, ver)); \
    return fn;                                                                        \
  }())
