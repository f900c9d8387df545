// stoker/export.h: which declarations libstoker exports. The library is built with hidden
// visibility: only what is marked STOKER_API (the public API in include/stoker/) and
// STOKER_TOOLS_API (the small internal API of stoker's own tools, docs/internal-api.md) is
// visible to programs that link it.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define STOKER_API __attribute__((visibility("default")))
#else
#define STOKER_API
#endif

#define STOKER_TOOLS_API STOKER_API
