//! Jobs a restarted daemon takes up again: recorded, never started, so nothing of them ran.

use super::{Prepared, RunError, Started};
use crate::domain::verification::{Settlement, Unfinished};
use crate::engine::runner::{Runner, WorkerLock};
use crate::ids;
use crate::verification::Verification;

impl Runner {
    /// Takes up a recorded job that never started (a restarted daemon resumes it): its worker
    /// lock on the recorded creation key, and its environment exactly as it was recorded.
    /// `Ok(None)`: another process holds it.
    pub fn resume(&self, p: Prepared, v: Verification) -> Result<Option<Started>, RunError> {
        if p.spec.sha256() != v.environment_sha256 {
            return Err(RunError::refused(
                "profile",
                format!(
                    "the profile's environment changed while the job was queued (recorded {}, now {})",
                    v.environment_sha256,
                    p.spec.sha256()
                ),
            ));
        }
        let lock =
            WorkerLock::try_acquire(&self.data.lock_path(&v.creation_key)).map_err(|source| {
                RunError::Host {
                    what: "taking the worker lock",
                    source,
                }
            })?;
        Ok(lock.map(|lock| Started {
            p,
            verification: v,
            lock,
            insert_us: 0,
        }))
    }

    /// Settles a recorded job that never ran as `error` with `why` (signed, then the
    /// artifact, then the row), when it cannot be resumed. Without its artifact the row is not
    /// settled: it stays `running`, and recovery settles it (interrupted, never a pass).
    pub async fn settle_unrun(
        &self,
        mut v: Verification,
        why: String,
    ) -> Result<Verification, RunError> {
        v.settle(Settlement::Unfinished(&Unfinished::NotResumed(why)))
            .map_err(|_| RunError::Invariant("a recorded job that never started is not running"))?;
        v.finished_at = Some(ids::rfc3339(self.clock.now()));
        self.attest.attest_verification(&mut v);
        crate::engine::blocking::blocking(|| self.data.artifacts.write_timed(&v)).map_err(
            |source| RunError::Artifact {
                verification_id: v.verification_id.clone(),
                source,
            },
        )?;
        self.data
            .store
            .settle(&v)
            .await
            .map_err(|source| RunError::Settle {
                verification_id: v.verification_id.clone(),
                source,
            })?;
        Ok(v)
    }
}
