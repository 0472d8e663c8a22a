//! Settings of the whole process rather than of a listener: how the kernel
//! backs its memory.

/// Stops the kernel from backing this process's memory with transparent
/// huge pages, unless `huge_pages`. Faulting in a fresh 2 MiB page stalls
/// the thread for milliseconds, and at 1,000 batches/s those stalls were
/// most of the ack latency's p99.
pub fn configure_memory(huge_pages: bool) {
    if huge_pages {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE reads only its integer arguments and
        // writes no memory of this process.
        let result = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if result != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "could not disable transparent huge pages; latency may have millisecond spikes"
            );
        }
    }
}
