//! Threads kept from one parallel step to the next. A replay takes a few
//! hundred steps a second, and a thread started for each step took about
//! a quarter of a millisecond to start working on a 2-core guest: a tenth
//! of the other core's time in a replay on two threads. A helper that is
//! done looks for its next step for a while before it sleeps, as the next
//! step comes within a fraction of a millisecond.

#![allow(unsafe_code)] // explained at the block (SAFETY)

use super::lock;
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a helper that is done looks for its next step before it sleeps.
const STAY_AWAKE: Duration = Duration::from_micros(500);

/// A step's work for a helper, called with the helper's index (from 1).
type Task = &'static (dyn Fn(usize) + Sync);

/// Helpers that are not working a step.
static IDLE: Mutex<Vec<Arc<Helper>>> = Mutex::new(Vec::new());

/// A kept thread, and the step it is given.
struct Helper {
    given: Mutex<Option<Given>>,
    /// Whether a step is given (looked at without the lock while awake).
    has_step: AtomicBool,
    thread: Thread,
}

/// A step given to a helper: the work, the helper's index, and the step's
/// bookkeeping.
struct Given {
    task: Task,
    index: usize,
    step: Arc<Step>,
}

/// What the thread that gave a step waits on.
struct Step {
    /// Helpers not yet done with it.
    working: AtomicUsize,
    giver: Thread,
    /// The first panic of a helper, passed on to the giver.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// How long the giver, then the helpers, look before they sleep: none
    /// when the step has more threads than the machine has cores, which
    /// would take the cores from each other by looking.
    awake: Duration,
}

/// Runs `task(i)` for `i` in `1..threads` on kept threads (fewer if
/// threads cannot be started: `task` must not need them all) and `own` on
/// this one, and returns once all are done, passing on a panic of any.
pub(super) fn scoped(threads: usize, task: &(dyn Fn(usize) + Sync), own: impl FnOnce()) {
    let helpers = take_idle(threads.saturating_sub(1));
    let step = Arc::new(Step {
        working: AtomicUsize::new(helpers.len()),
        giver: std::thread::current(),
        panic: Mutex::new(None),
        awake: if threads <= cores() {
            STAY_AWAKE
        } else {
            Duration::ZERO
        },
    });
    // SAFETY: `task` borrows from the caller, and lives past this call only
    // as the helpers hold it. `Done` waits for every helper to finish its
    // call of `task` before this function returns or unwinds, and a helper
    // touches nothing of `task` after that (it holds only the `Arc<Step>`).
    let task: Task = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Task>(task) };
    let done = Done(&step);
    for (index, helper) in (1..).zip(&helpers) {
        let step = step.clone();
        *lock(&helper.given) = Some(Given { task, index, step });
        helper.has_step.store(true, Ordering::Release);
        helper.thread.unpark();
    }
    own();
    drop(done);
    lock(&IDLE).extend(helpers);
    let panic = lock(&step.panic).take();
    if let Some(panic) = panic {
        resume_unwind(panic);
    }
}

/// Waits, when dropped, until every helper is done with the step.
struct Done<'a>(&'a Step);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        let done = || self.0.working.load(Ordering::Acquire) == 0;
        let sleep = || std::thread::park_timeout(Duration::from_millis(1));
        wait_until(self.0.awake, done, sleep);
    }
}

/// Returns once `ready`: looks for `awake`, giving way to any other thread
/// that can run between looks (a busy machine loses little to the
/// looking), then sleeps by `sleep` between looks (the thread that makes
/// it ready wakes this one).
fn wait_until(awake: Duration, ready: impl Fn() -> bool, sleep: impl Fn()) {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() < awake {
            std::thread::yield_now();
        } else {
            sleep();
        }
    }
}

/// The machine's cores (1 if it does not tell).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Up to `count` idle helpers, started as needed.
fn take_idle(count: usize) -> Vec<Arc<Helper>> {
    let mut idle = lock(&IDLE);
    let kept = idle.len().saturating_sub(count);
    let mut helpers = idle.split_off(kept);
    drop(idle);
    while helpers.len() < count {
        match start_helper() {
            Some(helper) => helpers.push(helper),
            None => break,
        }
    }
    helpers
}

/// A new helper, or `None` if no thread can be started.
fn start_helper() -> Option<Arc<Helper>> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("rankwatch-helper".into())
        .spawn(move || {
            let helper = Arc::new(Helper {
                given: Mutex::new(None),
                has_step: AtomicBool::new(false),
                thread: std::thread::current(),
            });
            if sender.send(helper.clone()).is_ok() {
                serve(&helper);
            }
        })
        .ok()?;
    receiver.recv().ok()
}

/// A helper's life: each step it is given, worked as it comes.
fn serve(helper: &Helper) -> ! {
    let mut awake = Duration::ZERO;
    loop {
        let given = || helper.has_step.load(Ordering::Acquire);
        wait_until(awake, given, std::thread::park);
        helper.has_step.store(false, Ordering::Relaxed);
        let Some(Given { task, index, step }) = lock(&helper.given).take() else {
            continue;
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| task(index))) {
            lock(&step.panic).get_or_insert(panic);
        }
        awake = step.awake;
        if step.working.fetch_sub(1, Ordering::AcqRel) == 1 {
            step.giver.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    #[test]
    fn each_helper_index_is_worked_once_on_a_kept_thread_and_own_here() {
        for threads in [1, 2, 4] {
            for _ in 0..3 {
                let calls: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
                let names = Mutex::new(Vec::new());
                let task = |index: usize| {
                    calls[index].fetch_add(1, Ordering::Relaxed);
                    let name = std::thread::current().name().map(str::to_owned);
                    names.lock().unwrap().push(name);
                };
                let mut own = 0;
                super::scoped(threads, &task, || own += 1);
                assert_eq!(own, 1);
                let calls: Vec<usize> = calls.iter().map(|c| c.load(Ordering::Relaxed)).collect();
                let mut expected = vec![1; threads];
                expected[0] = 0;
                assert_eq!(calls, expected, "{threads} threads");
                let names = names.into_inner().unwrap();
                assert!(names
                    .iter()
                    .all(|n| n.as_deref() == Some("rankwatch-helper")));
            }
        }
    }

    #[test]
    fn a_panicking_helper_passes_its_panic_on_and_the_next_step_runs() {
        let outcome = std::panic::catch_unwind(|| {
            super::scoped(2, &|_| panic!("helper"), || {});
        });
        assert!(outcome.is_err());
        let ran = AtomicUsize::new(0);
        let task = |_| {
            ran.fetch_add(1, Ordering::Relaxed);
        };
        super::scoped(2, &task, || {});
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }
}
