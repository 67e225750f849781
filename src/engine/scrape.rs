//! `GET /metrics`'s text: the registry's counters and histograms, with the state gauges read
//! now (SQLite's counts, each engine as the pool sees it, the dependency set store).

use super::Context;
use super::error::ServiceError;

impl Context {
    /// The OpenMetrics text of a scrape ([`crate::metrics::CONTENT_TYPE`]).
    pub async fn scrape_metrics(&self) -> Result<String, ServiceError> {
        let g = self
            .data
            .store
            .gauges(self.clock.now().unix_timestamp())
            .await
            .map_err(|e| ServiceError::internal(format!("metrics: {e}")))?;
        self.metrics
            .set_gauges(&g, &crate::metrics::KnownStates::all());
        let jobs = self
            .data
            .store
            .job_gauges(self.clock.now().unix_timestamp())
            .await
            .map_err(|e| ServiceError::internal(format!("metrics: {e}")))?;
        self.metrics
            .set_job_gauges(self.config.workspaces.keys().map(String::as_str), &jobs);
        let (reference, watched) = (self.pool.reference(), self.pool.watched_images());
        self.metrics
            .set_engines(self.pool.engines().iter().map(|e| {
                crate::metrics::EngineSample {
                    name: &e.name,
                    running: e.running(),
                    up: e.down_reason().is_none(),
                    failures: e.failures(),
                    image_mismatches: e.image_mismatches(reference, &watched).len(),
                    runtimes: e
                        .offered()
                        .map(|o| o.into_iter().map(|i| i.as_str()).collect()),
                }
            }));
        if let Some(store) = self.deps.store().cloned()
            && let Ok(st) = tokio::task::spawn_blocking(move || store.status()).await
        {
            self.metrics.record_dependency_store(&st);
        }
        Ok(self.metrics.encode())
    }
}
