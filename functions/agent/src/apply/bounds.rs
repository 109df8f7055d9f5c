//! The apply's bounds: each step's, the budgets of the steps under the lock and of the
//! ending, and the lock's wait; an assertion keeps them inside one another.

use std::time::Duration;

pub use crate::record::RECORD_TIMEOUT;
use crate::running::SILENT_BUDGET;

// Every step that holds the lock is bounded; a child past its limit is killed at once.
pub const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest config the apply downloads: a bound on its memory, not a guess at real sizes
/// (10,000 routes render to about 3 MB). A larger object fails the download; nothing changes.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024 * 1024;
/// How long the routes' new hosts may take to get their addresses before the swap: briefly,
/// so a new cluster serves as soon as its apply returns; a route whose host has none by then
/// is held ([`crate::routes`]) and the address service puts it in at its own pace.
pub const ADDRESS_BUDGET: Duration = Duration::from_secs(2);
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(30);
pub const RELOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long HAProxy gets to report a generation running.
pub const RUNNING_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the runtime update of the route tables may take before the apply reloads instead
/// (each command on the socket waits at most `QUESTION_TIMEOUT` more).
pub const UPDATE_BUDGET: Duration = Duration::from_secs(10);
/// How long the steps under the lock may take, all together, from the lock taken to the new
/// generation running (download, state, addresses, check, update or reload, running check):
/// past it the run stops where it is, as at a signal, and `Run::finish` undoes what it
/// installed. Each step keeps its own bound too (a child past it is killed at once).
pub const LOCKED_BUDGET: Duration = Duration::from_secs(170);
/// How long the ending may take, all together: the rollback, the fleet record and, after a
/// success, the address service kept running. The record always keeps [`RECORD_BUDGET`] of it.
pub const FINISH_BUDGET: Duration = Duration::from_secs(120);
/// The part of [`FINISH_BUDGET`] kept for the fleet record: the last question to HAProxy and
/// the put to S3.
pub const RECORD_BUDGET: Duration = Duration::from_secs(30);
/// How long an apply waits for another one's lock: longer than that one can hold it (its two
/// budgets), and short enough that a wait plus a whole apply fits the document's 600 s.
pub const APPLY_LOCK_WAIT: Duration = Duration::from_secs(300);
/// How long the apply's end waits for threads still blocked (a lock wait, a file write) once
/// its run is done: each of those waits is bounded on its own, and a deadline that fired
/// before one ended must not keep the process from exiting.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);
const _: () = assert!(
    LOCKED_BUDGET.as_secs() + FINISH_BUDGET.as_secs() < APPLY_LOCK_WAIT.as_secs()
        && RECORD_BUDGET.as_secs() > SILENT_BUDGET.as_secs() + RECORD_TIMEOUT.as_secs()
);
