//! Cancellation as Airlock passes it around: a `watch` channel of `bool` whose value flips to
//! `true` once. Every wait for it goes through [`requested`], so a sender dropped without
//! cancelling (its owner gone) never reads as a cancellation, and a loop that waits for it
//! beside other things never spins on a closed channel.

use tokio::sync::watch;

/// Resolves once `rx` holds `true` (at once when it does already); never, when its sender is
/// gone without having sent it.
pub async fn requested(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Long enough for a ready future to have resolved many times over.
    const WAIT: Duration = Duration::from_millis(100);

    #[tokio::test]
    async fn only_a_sent_true_is_a_cancellation() {
        let (tx, mut rx) = watch::channel(false);
        assert!(
            tokio::time::timeout(WAIT, requested(&mut rx))
                .await
                .is_err()
        );
        tx.send(true).unwrap();
        tokio::time::timeout(WAIT, requested(&mut rx))
            .await
            .expect("a sent true resolves");
        // Sent, then the sender gone: still cancelled.
        drop(tx);
        tokio::time::timeout(WAIT, requested(&mut rx))
            .await
            .expect("a true sent before the sender went resolves");
        // Gone without sending: never, however often it is asked.
        let (tx, mut rx) = watch::channel(false);
        drop(tx);
        for _ in 0..3 {
            assert!(
                tokio::time::timeout(WAIT, requested(&mut rx))
                    .await
                    .is_err()
            );
        }
        // A false sent is not a cancellation either.
        let (tx, mut rx) = watch::channel(false);
        tx.send(false).unwrap();
        assert!(
            tokio::time::timeout(WAIT, requested(&mut rx))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn waiting_on_a_closed_channel_beside_a_timer_does_not_spin() {
        // The loop shape the pool's placement has: wait for a cancellation or a tick.
        let (tx, mut rx) = watch::channel(false);
        drop(tx);
        let mut turns = 0;
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            turns += 1;
            tokio::select! {
                _ = requested(&mut rx) => unreachable!("never cancelled"),
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        assert!(turns <= 10, "{turns} turns in {WAIT:?}");
    }
}
