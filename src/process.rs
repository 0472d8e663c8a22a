//! Settings of the whole process rather than of a listener: how the kernel
//! backs its memory, and how many files it may open.

#![allow(unsafe_code)] // explained at each block (SAFETY)

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

/// Raises the soft limit on open files to the hard limit, so that a flood
/// of connections runs into `max_http_connections` and
/// `max_grpc_connections` rather than into a default soft limit of 1,024
/// descriptors. Returns the limit in force then, if it can be read.
pub fn raise_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only `limit`.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
        }
    };
    if !raised {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "could not raise the open-file limit"
        );
    }
    // SAFETY: getrlimit writes only `limit`.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 };
    read.then_some(limit.rlim_cur)
}
