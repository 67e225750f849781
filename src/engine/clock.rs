//! The one clock every workflow, the runner and recovery read.

use std::path::PathBuf;
use time::OffsetDateTime;

/// The clock. In builds with the `test-hooks` feature, tests may point `AIRLOCK_TEST_CLOCK_FILE`
/// at a file holding an RFC 3339 time; other builds always use the system clock.
#[derive(Debug, Clone)]
pub enum Clock {
    System,
    File(PathBuf),
}

/// Environment variable naming the test clock file.
pub const TEST_CLOCK_ENV: &str = "AIRLOCK_TEST_CLOCK_FILE";

impl Clock {
    pub fn from_env() -> Clock {
        if !cfg!(feature = "test-hooks") {
            return Clock::System;
        }
        match std::env::var_os(TEST_CLOCK_ENV) {
            Some(p) if !p.is_empty() => Clock::File(PathBuf::from(p)),
            _ => Clock::System,
        }
    }

    pub fn now(&self) -> OffsetDateTime {
        match self {
            Clock::System => crate::ids::now(),
            Clock::File(p) => std::fs::read_to_string(p)
                .ok()
                .and_then(|t| {
                    OffsetDateTime::parse(t.trim(), &time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .unwrap_or_else(crate::ids::now),
        }
    }
}
