#pragma once
// What a sanitizer build changes at run time, for the few places that must know (GCC defines
// __SANITIZE_*, clang answers __has_feature).

namespace sl {

#if defined(__SANITIZE_ADDRESS__)
#define SL_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_ADDRESS_SANITIZER 1
#endif
#endif

#if defined(SL_ADDRESS_SANITIZER) || defined(__SANITIZE_THREAD__)
#define SL_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define SL_SANITIZER_ALLOCATOR 1
#endif
#endif

// AddressSanitizer reserves terabytes of address space for its shadow memory.
#ifdef SL_ADDRESS_SANITIZER
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// A sanitizer's allocator, not glibc's, serves malloc (glibc's tunables do not apply).
#ifdef SL_SANITIZER_ALLOCATOR
inline constexpr bool kSanitizerAllocator = true;
#else
inline constexpr bool kSanitizerAllocator = false;
#endif

} // namespace sl
