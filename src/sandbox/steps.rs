//! Where one engine operation's time went, step by step: logged at debug level (target
//! `airlock::steps`) as one line per operation, which `scripts/bench-engines.sh` reads for its
//! phase breakdown. Costs two `Instant::now()` per step.

use std::time::Instant;

/// The steps of one operation, each with the microseconds since the previous mark.
pub struct Steps {
    what: &'static str,
    last: Instant,
    steps: Vec<(&'static str, u64)>,
}

impl Steps {
    /// Starts timing operation `what`.
    pub fn start(what: &'static str) -> Steps {
        Steps {
            what,
            last: Instant::now(),
            steps: Vec::new(),
        }
    }

    /// Ends step `name` now.
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.steps
            .push((name, now.duration_since(self.last).as_micros() as u64));
        self.last = now;
    }

    /// The steps as `name=us` pairs, in order.
    pub fn render(&self) -> String {
        self.steps
            .iter()
            .map(|(name, us)| format!("{name}={us}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Logs the steps (debug, target `airlock::steps`) for `subject`.
    pub fn log(&self, subject: &str) {
        tracing::debug!(target: "airlock::steps", op = self.what, subject, steps = %self.render(), "steps");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_render_in_order_with_their_durations() {
        let mut s = Steps::start("upload");
        s.mark("volume");
        std::thread::sleep(std::time::Duration::from_millis(2));
        s.mark("holder");
        let r = s.render();
        let parts: Vec<(&str, u64)> = r
            .split(' ')
            .map(|p| {
                let (n, us) = p.split_once('=').unwrap();
                (n, us.parse().unwrap())
            })
            .collect();
        assert_eq!(
            parts.iter().map(|p| p.0).collect::<Vec<_>>(),
            ["volume", "holder"]
        );
        assert!(parts[1].1 >= 2000, "{r}");
    }
}
