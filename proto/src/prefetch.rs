//! A cache prefetch hint, for the few hot paths whose cost is a chain of
//! cache misses (the counts cache's sets, a board chunk's binary search):
//! issuing the loads early lets their misses overlap.

/// A hint to the CPU to bring the line holding `p` into its caches.
/// Reads nothing the program can observe and never faults, whatever `p`
/// is (a dangling or out-of-bounds address included).
#[inline]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads no memory the program can observe and
    // cannot fault, whatever the address; `_mm_prefetch` needs only SSE,
    // which every x86_64 CPU has.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
