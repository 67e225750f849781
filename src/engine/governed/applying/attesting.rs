//! The signed statement of an applied transaction.

use super::TxRecord;
use crate::engine::error::ServiceError;
use crate::engine::governed::Applies;
use crate::store::applies::TxRow;

impl Applies {
    /// The signed statement of an apply whose post-images are all installed (none without a
    /// signing key): committed with the move to `applied`, in the same transaction.
    pub(super) async fn attest_apply(
        &self,
        t: &TxRow,
        r: &TxRecord,
    ) -> Result<Option<crate::attest::Envelope>, ServiceError> {
        let attest = &self.ctx.attest;
        if !attest.signs() {
            return Ok(None);
        }
        let (_, vrec) = self
            .validations
            .validation_in(&t.workspace_id, &t.validation_id)
            .await?;
        let mut verifications = Vec::new();
        for id in vrec
            .dry_run_verification
            .iter()
            .chain(&r.test_verifications)
        {
            let digest = self
                .ctx
                .data
                .store
                .get(id)
                .await?
                .and_then(|v| v.attestation)
                .map(|a| a.digest());
            verifications.push((id.clone(), digest));
        }
        let applied_at = self.ctx.now_rfc3339();
        let statement = crate::engine::attesting::transaction(
            &crate::engine::attesting::Transaction {
                transaction_id: &t.transaction_id,
                workspace_id: &t.workspace_id,
                proposal_id: &t.proposal_id,
                revision: &t.revision,
                head_before: r.head_before.as_deref(),
                head_after: r.head_after.as_deref(),
                applied_by: &r.applied_by,
                hashes: &r.hashes,
                approvals: &r.approvals,
                claims: &r.claims,
                validation_id: &t.validation_id,
                verifications,
                applied_at: &applied_at,
            },
            &attest.verifier,
        );
        Ok(attest.sign(&statement))
    }
}
