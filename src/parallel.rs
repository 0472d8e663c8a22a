//! Work shared among a few threads: each takes the next piece as it
//! finishes one, so a thread the machine keeps waiting holds up one piece,
//! not a fixed share of the work.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `work` applied to every piece on up to `threads` threads (this one
/// among them), the results in the pieces' order.
pub fn each<T: Send, R: Send>(
    pieces: Vec<T>,
    threads: usize,
    work: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.clamp(1, pieces.len().max(1));
    if threads == 1 {
        return pieces.into_iter().map(work).collect();
    }
    let count = pieces.len();
    let pieces: Vec<Mutex<Option<T>>> = pieces.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let results: Vec<Mutex<Option<R>>> = (0..count).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let take_and_work = || loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(piece) = pieces.get(index) else {
            return;
        };
        let piece = lock(piece).take();
        if let Some(piece) = piece {
            let result = work(piece);
            *lock(&results[index]) = Some(result);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(take_and_work);
        }
        take_and_work();
    });
    results
        .into_iter()
        .filter_map(|result| result.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// The value behind `mutex`, even if a thread panicked holding it (the
/// panic goes on to the caller when the scope ends).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_piece_is_worked_once_and_the_results_keep_their_order() {
        for threads in [1, 2, 3, 8] {
            let pieces: Vec<u64> = (0..50).collect();
            let squares = super::each(pieces, threads, |x| x * x);
            assert_eq!(squares, (0..50u64).map(|x| x * x).collect::<Vec<_>>());
        }
        assert!(super::each(Vec::<u8>::new(), 4, |x| x).is_empty());
    }
}
