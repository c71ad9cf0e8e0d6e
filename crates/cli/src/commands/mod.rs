//! One module per subcommand. Each returns the process exit code.

pub mod get;
pub mod history;
pub mod list;
pub mod pause;
pub mod plan;
pub mod promote;
pub mod version;
pub mod wait;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: an error (API refusal, not found, bad state).
pub const EXIT_ERROR: i32 = 1;
/// Exit code: the wait timed out.
pub const EXIT_TIMEOUT: i32 = 3;
