//! The job and webhook families: jobs by workspace and state, each workspace's queue, and
//! webhook attempts by result.

use super::*;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkspaceLabel {
    pub workspace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkspaceState {
    pub workspace: String,
    pub state: String,
}

/// What a webhook attempt came to: the receiver answered 2xx, it will be tried again, or it
/// was the last attempt.
pub const WEBHOOK_RESULTS: [&str; 3] = ["delivered", "retried", "failed"];

impl Metrics {
    /// Counts one webhook attempt's result ([`WEBHOOK_RESULTS`]).
    pub fn record_webhook(&self, result: &str) {
        self.webhook_deliveries
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// Sets the job gauges from a fresh read: every configured workspace gets every state (0
    /// when it has none), its queue depth and its oldest waiting job's age.
    pub fn set_job_gauges<'a>(
        &self,
        workspaces: impl IntoIterator<Item = &'a str>,
        g: &crate::store::gauges::JobGauges,
    ) {
        for ws in workspaces {
            for state in crate::wire::jobs::JobState::ALL {
                let n = g
                    .by_state
                    .iter()
                    .find(|(w, s, _)| w == ws && s == state.as_str())
                    .map_or(0, |r| r.2);
                self.jobs
                    .get_or_create(&WorkspaceState {
                        workspace: ws.to_string(),
                        state: state.as_str().to_string(),
                    })
                    .set(n);
            }
            let (depth, oldest) = g
                .queues
                .iter()
                .find(|(w, _, _)| w == ws)
                .map_or((0, 0), |q| (q.1, q.2));
            let label = WorkspaceLabel {
                workspace: ws.to_string(),
            };
            self.job_queue_depth.get_or_create(&label).set(depth);
            self.job_queue_oldest_seconds
                .get_or_create(&label)
                .set(oldest);
        }
    }
}
