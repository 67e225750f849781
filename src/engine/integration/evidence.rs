//! Evidence packets: a run's retained revision (private ref) and optional transcript
//! (checksummed artifact), with a bounded lifetime.

use crate::artifacts::write_atomic;
use crate::candidate::{self, EvidencePacket, EvidenceSource, MAX_TRANSCRIPT_BYTES};
use crate::config::{Permission, is_identifier};
use crate::engine::actor::Actor;
use crate::engine::blocking::blocking;
use crate::engine::error::ServiceError;
use crate::engine::idempotency::Prologue;
use crate::ids::parse_rfc3339 as parse_time;
use crate::staging::plumbing::RefOp;
use crate::store::Inserted;
use crate::wire::{RecordParams, ShowParams};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

#[derive(Serialize)]
struct RecordDigest<'a> {
    workspace_id: &'a str,
    run_id: &'a str,
    base_revision: &'a str,
    revision: &'a str,
    transcript_sha256: Option<&'a str>,
}

/// Private ref retaining a packet's revision.
pub fn evidence_ref_name(evidence_ref: &str) -> String {
    format!("refs/airlock/evidence/{evidence_ref}")
}

/// The evidence workflow: `evidence.record` and `evidence.show`, the packets prepare reads,
/// and their expiry. It holds the context only (no candidate lock, no admission: a packet
/// belongs to a run, not to a candidate).
#[derive(Clone)]
pub struct Evidence {
    ctx: crate::engine::context::Handles,
}

impl Evidence {
    pub fn new(ctx: crate::engine::context::Handles) -> Evidence {
        Evidence { ctx }
    }

    fn evidence_dir(&self) -> PathBuf {
        self.ctx.data.layout.evidence()
    }

    /// Path of a packet's transcript artifact.
    pub fn transcript_path(&self, evidence_ref: &str) -> PathBuf {
        self.ctx.data.layout.transcript(evidence_ref)
    }

    /// Records an evidence packet (idempotent per actor and key).
    pub async fn record(
        &self,
        actor: &Actor,
        p: RecordParams,
    ) -> Result<EvidencePacket, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Integrate)?;
        if let Actor::Run { run_id, .. } = actor
            && run_id != &p.run_id
        {
            return Err(ServiceError::PermissionDenied(format!(
                "run {run_id:?} cannot record evidence for run {:?}",
                p.run_id
            )));
        }
        if !is_identifier(&p.run_id) {
            return Err(ServiceError::invalid_field(
                "run_id",
                "run_id must be 1..=128 of letters, digits, '_', '-', '.'",
            ));
        }
        candidate::check_idempotency_key(&p.idempotency_key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        let repo = self.ctx.repo(&p.workspace_id);
        for (field, rev) in [
            ("base_revision", &p.base_revision),
            ("revision", &p.revision),
        ] {
            if !candidate::is_full_oid(rev) {
                return Err(ServiceError::invalid_field(
                    field,
                    format!("{field} must be a full lowercase commit id (40 or 64 hex digits)"),
                ));
            }
            if !blocking(|| repo.is_commit(rev)) {
                return Err(ServiceError::precondition_field(
                    field,
                    format!(
                        "{field} {rev} is not a commit in workspace {:?}",
                        p.workspace_id
                    ),
                ));
            }
        }
        if let Some(t) = &p.transcript
            && t.len() > MAX_TRANSCRIPT_BYTES
        {
            return Err(ServiceError::exhausted_field(
                "transcript",
                format!(
                    "transcript has {} bytes; the limit is {MAX_TRANSCRIPT_BYTES}",
                    t.len()
                ),
            ));
        }
        // Up to 16 MiB: hashed off the async workers' clock.
        let transcript_sha256 = blocking(|| {
            p.transcript
                .as_ref()
                .map(|t| hex::encode(Sha256::digest(t.as_bytes())))
        });
        let digest = candidate::digest(&RecordDigest {
            workspace_id: &p.workspace_id,
            run_id: &p.run_id,
            base_revision: &p.base_revision,
            revision: &p.revision,
            transcript_sha256: transcript_sha256.as_deref(),
        });
        let k = match self
            .ctx
            .keys
            .begin_digest(
                &p.workspace_id,
                actor,
                "evidence.record",
                &p.idempotency_key,
                digest,
            )
            .await?
        {
            Prologue::Replay(r) => return self.replay_evidence(&r).await,
            Prologue::Fresh(k) => k,
        };
        let evidence_ref = format!("evi_{}", crate::ids::new_creation_key());
        let now = self.ctx.clock.now();
        let packet = EvidencePacket {
            evidence_ref: evidence_ref.clone(),
            workspace_id: p.workspace_id.clone(),
            run_id: p.run_id.clone(),
            base_revision: p.base_revision.clone(),
            retained_revision: p.revision.clone(),
            sources: if p.transcript.is_some() {
                vec![EvidenceSource::Git, EvidenceSource::Transcript]
            } else {
                vec![EvidenceSource::Git]
            },
            transcript_sha256: transcript_sha256.clone(),
            created_at: crate::ids::rfc3339(now),
            expires_at: crate::ids::rfc3339(now + self.ctx.config.evidence_ttl),
        };
        // Durable retention first; the row that references them last.
        blocking(|| {
            if let Some(t) = &p.transcript {
                std::fs::create_dir_all(self.evidence_dir())
                    .map_err(|e| ServiceError::io("evidence dir", e))?;
                write_atomic(
                    &self.evidence_dir(),
                    &format!("{evidence_ref}.transcript"),
                    t.as_bytes(),
                )
                .map_err(|e| ServiceError::artifact("transcript", e))?;
            }
            repo.update_refs(&[RefOp::Create {
                name: evidence_ref_name(&evidence_ref),
                new: p.revision.clone(),
            }])
            .map_err(ServiceError::from)
        })?;
        let inserted = self
            .ctx
            .data
            .store
            .insert_evidence(
                k.binding(&p.workspace_id, actor, &evidence_ref),
                p.workspace_id.clone(),
                p.run_id.clone(),
                packet.expires_at.clone(),
                serde_json::to_string(&packet).expect("a packet serializes"),
            )
            .await?;
        match inserted {
            Inserted::New => Ok(packet),
            Inserted::Existing {
                digest: d,
                result_id,
            } => {
                // Lost a race with an identical request: drop what we retained, answer theirs.
                blocking(|| {
                    let _ = repo.update_refs(&[RefOp::Delete {
                        name: evidence_ref_name(&evidence_ref),
                        old: p.revision.clone(),
                    }]);
                    let _ = std::fs::remove_file(self.transcript_path(&evidence_ref));
                });
                self.replay_evidence(&k.judge(&d, result_id)?).await
            }
        }
    }

    /// The packet a replayed `evidence.record` recorded.
    async fn replay_evidence(&self, evidence_ref: &str) -> Result<EvidencePacket, ServiceError> {
        self.load_packet(evidence_ref).await?.ok_or_else(|| {
            ServiceError::precondition(format!(
                "evidence {evidence_ref} has expired and was purged"
            ))
        })
    }

    /// A packet by id, if present.
    pub async fn load_packet(
        &self,
        evidence_ref: &str,
    ) -> Result<Option<EvidencePacket>, ServiceError> {
        match self.ctx.data.store.evidence(evidence_ref).await? {
            None => Ok(None),
            Some(rec) => serde_json::from_str(&rec)
                .map(Some)
                .map_err(|e| ServiceError::record(format!("evidence {evidence_ref} record"), e)),
        }
    }

    /// [`Evidence::load_packet`] of each ref, in the order given, in one call to the store.
    pub async fn load_packets(
        &self,
        evidence_refs: Vec<String>,
    ) -> Result<Vec<Option<EvidencePacket>>, ServiceError> {
        let records = self
            .ctx
            .data
            .store
            .evidence_many(evidence_refs.clone())
            .await?;
        records
            .into_iter()
            .zip(&evidence_refs)
            .map(|(rec, evidence_ref)| match rec {
                None => Ok(None),
                Some(rec) => serde_json::from_str(&rec).map(Some).map_err(|e| {
                    ServiceError::record(format!("evidence {evidence_ref} record"), e)
                }),
            })
            .collect()
    }

    /// `evidence.show`.
    pub async fn show(&self, actor: &Actor, p: ShowParams) -> Result<EvidencePacket, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let not_found = || {
            ServiceError::NotFound(format!(
                "evidence {:?} not found in workspace {:?}",
                p.evidence_ref, p.workspace_id
            ))
        };
        let packet = self
            .load_packet(&p.evidence_ref)
            .await?
            .ok_or_else(not_found)?;
        if packet.workspace_id != p.workspace_id {
            return Err(not_found());
        }
        Ok(packet)
    }

    /// True when the packet's lifetime has ended at the service's current time.
    pub fn packet_expired(&self, packet: &EvidencePacket) -> bool {
        parse_time(&packet.expires_at).is_none_or(|t| t <= self.ctx.clock.now())
    }

    /// Purges expired packets: their private ref, transcript and row. Returns how many.
    pub async fn expire(&self) -> Result<usize, ServiceError> {
        let due = self
            .ctx
            .data
            .store
            .expired_evidence(self.ctx.now_rfc3339())
            .await?;
        let mut n = 0;
        for (evidence_ref, ws) in due {
            if !self.ctx.config.workspaces.contains_key(&ws) {
                continue;
            }
            let repo = self.ctx.repo(&ws);
            let name = evidence_ref_name(&evidence_ref);
            blocking(|| match repo.ref_value(&name)? {
                Some(old) => repo.update_refs(&[RefOp::Delete { name, old }]),
                None => Ok(()),
            })?;
            match std::fs::remove_file(self.transcript_path(&evidence_ref)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ServiceError::io("remove transcript", e)),
            }
            self.ctx.data.store.delete_evidence(&evidence_ref).await?;
            n += 1;
        }
        Ok(n)
    }
}
