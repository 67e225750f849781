//! `integration.request_delivery`, `integration.decide`, `integration.deliver` and receipt
//! reconciliation.

use super::*;

/// Delivery: `integration.request_delivery`, `integration.decide`, `integration.deliver`, and
/// the reconciliation of receipts a crash left unsettled. Holds the candidates.
#[derive(Clone)]
pub struct Deliveries {
    ctx: crate::engine::context::Handles,
    candidates: Candidates,
}

impl Deliveries {
    pub fn new(candidates: Candidates) -> Deliveries {
        Deliveries {
            ctx: candidates.ctx.clone(),
            candidates,
        }
    }
}

impl Deliveries {
    /// Checks a selected verification is still valid evidence for `rev` at `now`.
    pub(super) fn check_selected(
        &self,
        i: usize,
        id: &str,
        rows: &[(Verification, bool)],
        rev: &str,
    ) -> Result<Verification, ServiceError> {
        let field = format!("verification_ids[{i}]");
        let Some((v, _)) = rows.iter().find(|(v, _)| v.verification_id == id) else {
            return Err(ServiceError::precondition_field(
                field.clone(),
                format!("{field} {id:?} is not a verification of this candidate"),
            ));
        };
        if v.status != Status::Passed {
            return Err(ServiceError::precondition_field(
                field.clone(),
                format!("{field} {id} is {}, not passed", v.status.as_str()),
            ));
        }
        if v.candidate_revision != rev {
            return Err(ServiceError::precondition_field(
                field.clone(),
                format!("{field} {id} verified {}, not {rev}", v.candidate_revision),
            ));
        }
        if parse_time(&v.expires_at).is_none_or(|t| t <= self.ctx.clock.now()) {
            return Err(ServiceError::precondition_field(
                field.clone(),
                format!("{field} {id} expired at {}", v.expires_at),
            ));
        }
        // A later attempt of the same argv that did not pass (cancelled aside) overrides it.
        if let Some((later, _)) = rows.iter().find(|(w, _)| {
            w.argv == v.argv
                && w.verification_id != v.verification_id
                && (w.created_at.as_str(), w.verification_id.as_str())
                    > (v.created_at.as_str(), v.verification_id.as_str())
                && !matches!(w.status, Status::Passed | Status::Cancelled)
        }) {
            return Err(ServiceError::precondition_field(
                field.clone(),
                format!(
                    "{field} {id} is overridden by the later {} verification {} of the same argv",
                    later.status.as_str(),
                    later.verification_id
                ),
            ));
        }
        Ok(v.clone())
    }

    /// `integration.request_delivery`.
    pub async fn request_delivery(
        &self,
        actor: &Actor,
        p: RequestParams,
    ) -> Result<Candidate, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Integrate)?;
        candidate::check_idempotency_key(&p.idempotency_key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        if p.verification_ids.is_empty() || p.verification_ids.len() > MAX_REQUEST_VERIFICATIONS {
            return Err(ServiceError::invalid_field(
                "verification_ids",
                format!(
                    "verification_ids has {} entries; it needs 1..={MAX_REQUEST_VERIFICATIONS}",
                    p.verification_ids.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, id) in p.verification_ids.iter().enumerate() {
            if !seen.insert(id) {
                return Err(ServiceError::invalid_field(
                    format!("verification_ids[{i}]"),
                    format!("verification_ids[{i}] {id:?} is a duplicate"),
                ));
            }
        }
        let digest = candidate::digest(&RequestParams {
            idempotency_key: String::new(),
            ..p.clone()
        });
        let Begun {
            mut l,
            actor_key,
            key,
            guard: _guard,
            admitted: _admitted,
        } = self
            .candidates
            .begin_mutation(
                actor,
                Operation::RequestDelivery,
                &p.workspace_id,
                &p.candidate_id,
                &p.idempotency_key,
                &digest,
            )
            .await?;
        let Some(key) = key else {
            return self.candidates.hydrate(l.c).await;
        };
        let rev = frozen_revision(&l.c)?;
        if p.candidate_revision != rev {
            return Err(ServiceError::precondition_field(
                "candidate_revision",
                format!(
                    "candidate_revision {} is not the candidate's frozen revision {rev}",
                    p.candidate_revision
                ),
            ));
        }
        if l.c.delivery_receipt.is_some() {
            return Err(ServiceError::precondition(
                "the candidate was already delivered",
            ));
        }
        if l.c
            .delivery_request
            .as_ref()
            .is_some_and(|r| r.state == RequestState::Delivering)
        {
            return Err(ServiceError::Conflict(
                "a delivery of the current request is in progress".into(),
            ));
        }
        blocking(|| self.candidates.require_owned_evidence(&l.c))?;
        let rows = self
            .ctx
            .data
            .store
            .verifications_of(&l.c.candidate_id)
            .await?;
        let mut expires = parse_time(&l.c.expires_at).unwrap_or_else(|| self.ctx.clock.now());
        for (i, id) in p.verification_ids.iter().enumerate() {
            let v = self.check_selected(i, id, &rows, &rev)?;
            if let Some(t) = parse_time(&v.expires_at) {
                expires = expires.min(t);
            }
        }
        let version = l.a.last_request_version + 1;
        let request = DeliveryRequest {
            request_id: format!("req_{}", crate::ids::new_creation_key()),
            request_version: version,
            candidate_revision: rev,
            verification_ids: p.verification_ids.clone(),
            target_ref: l.c.target_ref.clone(),
            expected_target_revision: l.c.expected_target_revision.clone(),
            action: p.action,
            state: RequestState::Requested,
            requested_by: actor_key.clone(),
            decided_by: None,
            decision_reason: None,
            created_at: self.ctx.now_rfc3339(),
            expires_at: crate::ids::rfc3339(expires),
            decided_at: None,
        };
        l.a.last_request_version = version;
        let result_id = request.request_id.clone();
        l.c.delivery_request = Some(request);
        self.candidates
            .save_mutation(&mut l, &key, MutationOperation::RequestDelivery, result_id)
            .await?;
        self.candidates.hydrate(l.c).await
    }

    /// `integration.decide`: the human approval boundary, fenced by the exact request version.
    pub async fn decide(&self, actor: &Actor, p: DecideParams) -> Result<Candidate, ServiceError> {
        let Actor::Member { .. } = actor else {
            return Err(ServiceError::PermissionDenied(
                "integration.decide is human-only: run actors cannot approve or deny".into(),
            ));
        };
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Decide)?;
        let lock = self.candidates.candidate_lock(&p.candidate_id);
        let _guard = lock.lock().await;
        let mut l = self
            .candidates
            .load(&p.workspace_id, &p.candidate_id)
            .await?;
        let _admitted = self
            .candidates
            .admit_on(actor, Operation::Decide, true, &l.c)?;
        if l.c.state.is_fenced() {
            return Err(ServiceError::precondition(format!(
                "candidate is {}",
                l.c.state.as_str()
            )));
        }
        let reason = p
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        if let Some(r) = &reason {
            crate::engine::governed::check_text_field(
                "reason",
                r,
                false,
                limits::MAX_DECISION_REASON_BYTES,
            )?;
        }
        let now = self.ctx.clock.now();
        let req = current_request(&mut l.c, &p.request_id, p.request_version)?;
        let event = if p.approve {
            RequestEvent::Approve
        } else {
            RequestEvent::Deny
        };
        let wanted = match req.state.on(event) {
            Ok(next) => next,
            Err(illegal) => {
                // The same member repeating the same decision gets the current candidate.
                let same = req.decided_by.as_deref() == Some(actor.key().as_str())
                    && RequestState::Requested.on(event) == Ok(req.state);
                if same {
                    return self.candidates.hydrate(l.c).await;
                }
                return Err(ServiceError::Conflict(format!(
                    "request {} is already {} ({illegal})",
                    p.request_id,
                    req.state.as_str()
                )));
            }
        };
        if parse_time(&req.expires_at).is_none_or(|t| t <= now) {
            return Err(ServiceError::precondition(format!(
                "request {} expired at {}",
                p.request_id, req.expires_at
            )));
        }
        // Separation of duties: whoever asked for a delivery does not also approve or deny it.
        let distinct = self
            .ctx
            .config
            .workspaces
            .get(&p.workspace_id)
            .is_some_and(|w| w.distinct_approver);
        if distinct && req.requested_by == actor.key() {
            return Err(ServiceError::PermissionDenied(format!(
                "{} requested delivery {}; workspace {} has distinct_approver = true, so another member with decide must decide it",
                actor.key(),
                p.request_id,
                p.workspace_id
            )));
        }
        req.state = wanted;
        req.decided_by = Some(actor.key());
        req.decided_at = Some(crate::ids::rfc3339(now));
        req.decision_reason = reason;
        let request_id = req.request_id.clone();
        l.c.record_mutation(Mutation {
            actor_key: actor.key(),
            operation: MutationOperation::Decide,
            idempotency_key: String::new(),
            digest: candidate::digest(&(p.approve, &p.request_id, p.request_version)),
            result_id: request_id,
        });
        self.candidates.save(&mut l, None, None).await?;
        self.candidates.hydrate(l.c).await
    }

    /// `integration.deliver`.
    pub async fn deliver(
        &self,
        actor: &Actor,
        p: DeliverParams,
    ) -> Result<Candidate, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Push)?;
        let lock = self.candidates.candidate_lock(&p.candidate_id);
        let _guard = lock.lock().await;
        let mut l = self
            .candidates
            .load(&p.workspace_id, &p.candidate_id)
            .await?;
        let _admitted = self
            .candidates
            .admit_on(actor, Operation::Deliver, true, &l.c)?;
        let repo = self.ctx.repo(&p.workspace_id).clone();
        let req = current_request(&mut l.c, &p.request_id, p.request_version)?.clone();
        // A receipt (in the aggregate, or only in Git after a lost save) is the original result.
        if l.c
            .delivery_receipt
            .as_ref()
            .is_some_and(|r| r.request_id == req.request_id)
        {
            return self.candidates.hydrate(l.c).await;
        }
        if let Some(receipt) = blocking(|| self.read_receipt(&repo, &req.request_id))? {
            self.settle_delivery(&mut l, receipt, actor).await?;
            return self.candidates.hydrate(l.c).await;
        }
        if l.c.state.is_fenced() {
            return Err(ServiceError::precondition(format!(
                "candidate is {}",
                l.c.state.as_str()
            )));
        }
        // A claimed request (delivering) is resumed: its receipt decides what happened.
        let claim = if req.state == RequestState::Delivering {
            None
        } else {
            Some(req.state.on(RequestEvent::Claim).map_err(|_| {
                ServiceError::precondition(format!(
                    "request {} is {}, not approved",
                    req.request_id,
                    req.state.as_str()
                ))
            })?)
        };
        let now = self.ctx.clock.now();
        if parse_time(&req.expires_at).is_none_or(|t| t <= now) {
            return Err(ServiceError::precondition(format!(
                "request {} expired at {}",
                req.request_id, req.expires_at
            )));
        }
        let rev = frozen_revision(&l.c)?;
        if req.candidate_revision != rev
            || req.target_ref != l.c.target_ref
            || req.expected_target_revision != l.c.expected_target_revision
        {
            return Err(ServiceError::Conflict(
                "the request no longer matches the candidate".into(),
            ));
        }
        blocking(|| self.candidates.require_owned_evidence(&l.c))?;
        let rows = self
            .ctx
            .data
            .store
            .verifications_of(&l.c.candidate_id)
            .await?;
        let mut selected = Vec::with_capacity(req.verification_ids.len());
        for (i, id) in req.verification_ids.iter().enumerate() {
            selected.push(self.check_selected(i, id, &rows, &rev)?);
        }
        let current_target = blocking(|| repo.ref_value(&req.target_ref))?;
        if req.action == DeliveryAction::UpdateRef
            && current_target.as_deref() != Some(req.expected_target_revision.as_str())
        {
            return Err(ServiceError::Conflict(format!(
                "target {} moved: it is at {}, the candidate was built on {}; nothing was changed",
                req.target_ref,
                current_target.as_deref().unwrap_or("(missing)"),
                req.expected_target_revision
            )));
        }
        // Durable claim before any ref moves.
        if let Some(claimed) = claim {
            current_request(&mut l.c, &p.request_id, p.request_version)?.state = claimed;
            self.candidates.save(&mut l, None, None).await?;
        }
        let (result, proposal, previous) = match req.action {
            DeliveryAction::UpdateRef => (
                ReceiptResult::Landed,
                None,
                Some(req.expected_target_revision.clone()),
            ),
            DeliveryAction::Proposal => (
                ReceiptResult::Proposed,
                Some(proposal_ref(&req.request_id)),
                current_target.clone(),
            ),
        };
        // The commit that lands: the candidate's tree with the story in its message, from
        // durable facts only (a retry after a crash makes the same commit).
        let history = self.candidates.history_of(&l.c.workspace_id);
        let decided_at = req
            .decided_at
            .as_deref()
            .and_then(parse_time)
            .map_or_else(|| self.candidates.stamp_time(&l.c), |t| t.unix_timestamp());
        let chosen: Vec<&Verification> = selected.iter().collect();
        let landed = blocking(|| {
            super::history::landed_commit(&repo, &l.c, &req, &chosen, history, decided_at)
        })?;
        let mut receipt = DeliveryReceipt {
            receipt_id: format!("rcpt_{}", crate::ids::new_creation_key()),
            request_id: req.request_id.clone(),
            candidate_revision: rev.clone(),
            landed_revision: Some(landed.clone()),
            target_ref: req.target_ref.clone(),
            previous_revision: previous,
            action: req.action,
            result,
            proposal_ref: proposal.clone(),
            created_at: crate::ids::rfc3339(now),
            attestation: None,
        };
        // Signed before anything moves: the receipt carries it into the ref transaction, and
        // the note on the landed commit carries it with the verifications' own.
        let landed_tree = blocking(|| repo.commit_tree_of(&landed))?;
        let statement = crate::engine::attesting::delivery(
            &crate::engine::attesting::Delivery {
                landed_revision: &landed,
                landed_tree: &landed_tree,
                workspace_id: &l.c.workspace_id,
                candidate_id: &l.c.candidate_id,
                request: &req,
                receipt: &receipt,
                verifications: &chosen,
            },
            &self.ctx.attest.verifier,
        );
        receipt.attestation = self.ctx.attest.sign(&statement);
        let note = match &receipt.attestation {
            Some(a) => {
                let mut text = crate::canonical::to_string(a);
                text.push('\n');
                for v in &chosen {
                    if let Some(va) = &v.attestation {
                        text.push_str(&crate::canonical::to_string(va));
                        text.push('\n');
                    }
                }
                Some(blocking(|| repo.write_blob(text.as_bytes()))?)
            }
            None => None,
        };
        let receipt_json = serde_json::to_string(&receipt).expect("a receipt serializes");
        let blob = blocking(|| repo.write_blob(receipt_json.as_bytes()))?;
        let mut ops = Vec::new();
        match (&req.action, &proposal) {
            (DeliveryAction::UpdateRef, _) => ops.push(RefOp::Update {
                name: req.target_ref.clone(),
                new: landed.clone(),
                old: req.expected_target_revision.clone(),
            }),
            (DeliveryAction::Proposal, Some(name)) => ops.push(RefOp::Create {
                name: name.clone(),
                new: landed.clone(),
            }),
            (DeliveryAction::Proposal, None) => unreachable!("a proposal always names its ref"),
        }
        ops.push(RefOp::Create {
            name: receipt_ref(&req.request_id),
            new: blob,
        });
        let mut attempt = 0;
        let updated = loop {
            attempt += 1;
            let mut all = ops.clone();
            // The notes ref as this attempt found it (None: no notes yet).
            let mut notes_seen = None;
            if let Some(blob) = &note {
                let op = blocking(|| repo.note_op(&landed, blob, now.unix_timestamp()))?;
                notes_seen = Some(match &op {
                    RefOp::Update { old, .. } => Some(old.clone()),
                    _ => None,
                });
                all.push(op);
            }
            let result = blocking(|| repo.update_refs(&all));
            let notes_moved = || -> Result<bool, ServiceError> {
                let now = blocking(|| repo.ref_value(crate::staging::notes::NOTES_REF))?;
                Ok(notes_seen.as_ref().is_some_and(|seen| *seen != now))
            };
            match result {
                Ok(()) => break Ok(()),
                // Another delivery moved the notes ref between its read and this transaction
                // (nothing of this one moved): made again on the notes as they are now.
                Err(_) if attempt < limits::NOTES_ATTEMPTS && notes_moved()? => {
                    tracing::info!(
                        request_id = %req.request_id,
                        attempt,
                        "refs/notes/airlock moved under this delivery; its note is made again"
                    );
                    continue;
                }
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = updated {
            // Nothing moved (the transaction is atomic). Say why.
            if let Some(r) = blocking(|| self.read_receipt(&repo, &req.request_id))? {
                self.settle_delivery(&mut l, r, actor).await?;
                return self.candidates.hydrate(l.c).await;
            }
            let now_target = blocking(|| repo.ref_value(&req.target_ref))?;
            if req.action == DeliveryAction::UpdateRef
                && now_target.as_deref() != Some(req.expected_target_revision.as_str())
            {
                return Err(ServiceError::Conflict(format!(
                    "target {} moved; nothing was changed",
                    req.target_ref
                )));
            }
            if let (DeliveryAction::Proposal, Some(name)) = (&req.action, &proposal)
                && blocking(|| repo.ref_value(name))?.is_some()
            {
                return Err(ServiceError::Conflict(format!(
                    "the proposal ref {name} already exists; nothing was changed"
                )));
            }
            if e.is_ref_locked() {
                return Err(ServiceError::Unavailable(format!(
                    "another git process holds the lock of a ref this delivery writes ({e}); nothing was changed: retry the delivery"
                )));
            }
            // Anything else is git failing, not a competing change: a malfunction.
            return Err(ServiceError::from(e));
        }
        crate::crash::point(crate::crash::CrashPoint::DeliverAfterRefs);
        self.settle_delivery(&mut l, receipt, actor).await?;
        self.candidates.hydrate(l.c).await
    }

    pub(super) fn read_receipt(
        &self,
        repo: &crate::staging::Repo,
        request_id: &str,
    ) -> Result<Option<DeliveryReceipt>, ServiceError> {
        let Some(oid) = repo.ref_value(&receipt_ref(request_id))? else {
            return Ok(None);
        };
        let bytes = repo.read_blob(&oid)?;
        let receipt: DeliveryReceipt = serde_json::from_slice(&bytes)
            .map_err(|e| ServiceError::record(format!("receipt of {request_id}"), e))?;
        if receipt.request_id != request_id {
            return Err(ServiceError::internal(format!(
                "receipt ref of {request_id} names {}",
                receipt.request_id
            )));
        }
        Ok(Some(receipt))
    }

    /// Saves a receipt (from this call or reconciled from Git) into the aggregate.
    pub(super) async fn settle_delivery(
        &self,
        l: &mut super::Loaded,
        receipt: DeliveryReceipt,
        actor: &Actor,
    ) -> Result<(), ServiceError> {
        if let Some(req) =
            l.c.delivery_request
                .as_mut()
                .filter(|r| r.request_id == receipt.request_id)
        {
            req.state = req.state.on(RequestEvent::Complete)?;
        }
        l.c.record_mutation(Mutation {
            actor_key: actor.key(),
            operation: MutationOperation::Deliver,
            idempotency_key: String::new(),
            digest: String::new(),
            result_id: receipt.receipt_id.clone(),
        });
        l.c.delivery_receipt = Some(receipt);
        self.candidates.save(l, None, None).await
    }

    /// Recovery for deliveries: a `delivering` request whose receipt is in Git is settled from it.
    pub async fn reconcile_deliveries(&self) -> Result<usize, ServiceError> {
        let mut n = 0;
        for (cid, ws) in self.ctx.data.store.candidates_delivering().await? {
            if !self.ctx.config.workspaces.contains_key(&ws) {
                continue;
            }
            let lock = self.candidates.candidate_lock(&cid);
            let _guard = lock.lock().await;
            let mut l = self.candidates.load(&ws, &cid).await?;
            let Some(req) = l.c.delivery_request.clone() else {
                continue;
            };
            if req.state != RequestState::Delivering || l.c.delivery_receipt.is_some() {
                continue;
            }
            if let Some(r) = blocking(|| self.read_receipt(self.ctx.repo(&ws), &req.request_id))? {
                let system = Actor::System {
                    task: SystemTask::Recovery,
                };
                self.settle_delivery(&mut l, r, &system).await?;
                n += 1;
            }
        }
        Ok(n)
    }
}
/// Private ref holding a delivery receipt (a blob of canonical JSON).
pub fn receipt_ref(request_id: &str) -> String {
    format!("refs/airlock/receipts/{request_id}")
}

/// Public proposal ref of a request.
pub fn proposal_ref(request_id: &str) -> String {
    format!("refs/heads/airlock/proposal-{request_id}")
}

pub(super) fn current_request<'a>(
    c: &'a mut Candidate,
    request_id: &str,
    version: u64,
) -> Result<&'a mut DeliveryRequest, ServiceError> {
    let req = c
        .delivery_request
        .as_mut()
        .ok_or_else(|| ServiceError::precondition("the candidate has no delivery request"))?;
    if req.request_id != request_id || req.request_version != version {
        return Err(ServiceError::Conflict(format!(
            "request {request_id} version {version} is not the current request ({} version {})",
            req.request_id, req.request_version
        )));
    }
    Ok(req)
}
