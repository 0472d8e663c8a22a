//! Loading ahead: hints that let the cache misses of several lookups
//! overlap instead of following one another.

/// Asks the CPU to start loading the cache line at `address`: a hint that
/// never faults, whatever the address.
#[inline(always)]
#[allow(unsafe_code)]
pub(crate) fn prefetch<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch instruction reads nothing into the program and
    // cannot fault, so any address is sound.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
