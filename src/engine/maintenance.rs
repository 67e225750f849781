//! The daemon's periodic work, in a fixed order: recovery of interrupted verifications (and
//! retention of one-shot results), delivery reconciliation from receipts, evidence expiry,
//! candidate expiry, claim expiry, apply recovery and claim retention, packing Airlock's private refs, pruning idle per-candidate
//! locks.
//! Every step's failure is logged and retried on the next pass; no step depends on an earlier
//! one having succeeded.

use super::runner::recovery;
use crate::engine::service::Service;

/// One maintenance pass. Runs before the listener opens and then every
/// `maintenance_interval_seconds`.
pub async fn pass(service: &Service) {
    let retention = recovery::Bounds {
        keep: service.ctx.config.run_retention,
        engine_lost_after: service.ctx.config.engine_lost_after,
        now: service.ctx.clock.now(),
    };
    let report = recovery::recover(
        &service.ctx.data,
        &service.ctx.engines(),
        &service.ctx.attest,
        retention,
    )
    .await;
    let m = &service.ctx.metrics;
    m.recovered(
        "restored_from_artifact",
        report.restored_from_artifact.len(),
    );
    m.recovered("marked_error", report.marked_error.len());
    m.recovered("quarantined", report.quarantined.len());
    m.recovered("container_destroyed", report.containers_destroyed.len());
    m.recovered("checkout_removed", report.checkouts_removed.len());
    m.recovered("temp_file_removed", report.temp_files_removed.len());
    m.recovered("lock_file_removed", report.lock_files_removed.len());
    m.recovered("result_expired", report.results_expired.len());
    if !report.is_empty() {
        tracing::info!(report = %serde_json::to_string(&report).unwrap_or_default(), "recovery pass");
    }
    if let Err(e) = service.deliveries.reconcile_deliveries().await {
        tracing::error!(error = %e, "delivery reconciliation failed; will retry");
    }
    if let Err(e) = service.evidence.expire().await {
        tracing::error!(error = %e, "evidence expiry failed; will retry");
    }
    match service.lifecycle.expire_candidates().await {
        Ok((0, 0)) => {}
        Ok((expired, purged)) => tracing::info!(expired, purged, "candidate expiry pass"),
        Err(e) => tracing::error!(error = %e, "candidate expiry failed; will retry"),
    }
    match service.claims.expire_claims().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(expired = n, "claims past their expiry marked expired"),
        Err(e) => tracing::error!(error = %e, "claim expiry failed; will retry"),
    }
    match service.applies.recover_transactions().await {
        Ok(r) if r.settled.is_empty() => {}
        Ok(r) => {
            for t in &r.settled {
                m.recovered(&format!("transaction_{}", t.status.as_str()), 1);
            }
            tracing::info!(
                settled = ?r.settled,
                "interrupted applies recovered from their files"
            )
        }
        Err(e) => tracing::error!(error = %e, "apply recovery failed; will retry"),
    }
    match service.claims.purge_ended_claims().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(purged = n, "ended claims past claim_retention_days removed"),
        Err(e) => tracing::error!(error = %e, "claim retention failed; will retry"),
    }
    match service.ctx.keys.prune_sealed().await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(pruned = n, "sealed answers past their retention removed"),
        Err(e) => tracing::error!(error = %e, "sealed answer retention failed; will retry"),
    }
    pack_refs(service).await;
    let pruned = service.candidates.prune_candidate_locks();
    if pruned > 0 {
        tracing::debug!(pruned, "idle candidate locks pruned");
    }
}

/// Packs `refs/airlock/*` of every workspace repository, so ref lookups stay flat as candidates
/// accumulate. `git pack-refs` takes the same locks as any ref update, so it is safe beside the
/// daemon's own concurrent ref transactions.
async fn pack_refs(service: &Service) {
    for ws in service.ctx.config.workspaces.keys() {
        let repo = service.ctx.repo(ws).clone();
        let packed = tokio::task::spawn_blocking(move || repo.pack_airlock_refs())
            .await
            .expect("pack-refs does not panic");
        match packed {
            Ok(true) => tracing::debug!(workspace = %ws, "Airlock's refs packed"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(workspace = %ws, error = %e, "packing Airlock's refs failed; will retry")
            }
        }
    }
}
