use super::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_burst_is_free_then_the_refill_rate_paces() {
    let b = TokenBucket::new(BucketLimit::new(5, 2.0));
    let start = Instant::now();
    for _ in 0..5 {
        assert_eq!(b.acquire().await, Duration::ZERO);
    }
    for _ in 0..4 {
        b.acquire().await;
    }
    // 4 tokens past the burst at 2/s: 2 seconds.
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(1990) && took <= Duration::from_millis(2100),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_are_paced_together() {
    let b = Arc::new(TokenBucket::new(BucketLimit::new(1, 10.0)));
    let start = Instant::now();
    let tasks: Vec<_> = (0..11)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.acquire().await })
        })
        .collect();
    for t in tasks {
        assert!(t.await.is_ok());
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(990) && took <= Duration::from_millis(1100),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttled_answer_pauses_the_class_with_growing_pauses() {
    let b = TokenBucket::new(BucketLimit::new(100, 100.0));
    let base = Duration::from_millis(100);
    let max = Duration::from_millis(350);
    assert_eq!(b.penalize(base, max).await, Duration::from_millis(100));
    assert_eq!(b.penalize(base, max).await, Duration::from_millis(200));
    assert_eq!(b.penalize(base, max).await, Duration::from_millis(350));
    let start = Instant::now();
    b.acquire().await;
    assert!(start.elapsed() >= Duration::from_millis(350));
    b.succeeded().await;
    assert_eq!(b.penalize(base, max).await, Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn the_wait_estimate_takes_no_token() {
    let b = TokenBucket::new(BucketLimit::new(1, 1.0));
    assert_eq!(b.wait_estimate().await, Duration::ZERO);
    assert_eq!(b.wait_estimate().await, Duration::ZERO);
    assert_eq!(b.acquire().await, Duration::ZERO);
    let est = b.wait_estimate().await;
    assert!(est > Duration::from_millis(900), "{est:?}");
}

#[tokio::test]
async fn a_disabled_budget_never_waits() {
    let budget = Budget::new(false, [(0u8, BucketLimit::new(1, 0.001))]);
    let l = budget.scope("a");
    for _ in 0..100 {
        assert_eq!(l.acquire(0).await, Duration::ZERO);
    }
}

#[tokio::test(start_paused = true)]
async fn scopes_have_separate_buckets_and_idle_ones_are_dropped() {
    let budget = Budget::new(true, [(0u8, BucketLimit::new(1, 0.01))]);
    assert_eq!(budget.scope("a").acquire(0).await, Duration::ZERO);
    // Another scope has its own full bucket.
    assert_eq!(budget.scope("b").acquire(0).await, Duration::ZERO);
    assert!(budget.scope("a").wait_estimate(0).await > Duration::from_secs(10));
    assert_eq!(budget.scope_count(), 2);
    tokio::time::advance(Budget::<u8>::IDLE + Duration::from_secs(1)).await;
    let _c = budget.scope("c");
    assert_eq!(budget.scope_count(), 1);
}

#[test]
fn per_minute_limits_burst_the_whole_minute() {
    let l = BucketLimit::per_minute(1500);
    assert_eq!(l.capacity, 1500);
    assert!((l.refill_per_sec - 25.0).abs() < 1e-9);
    assert_eq!(BucketLimit::per_minute(0).capacity, 1);
}

/// Reserves `n` turns of `b` and returns them with their waits.
async fn reserve_many(b: &TokenBucket, n: usize) -> Vec<(Turn, Duration)> {
    let mut turns = Vec::new();
    for _ in 0..n {
        turns.push(b.reserve_turn().await);
    }
    turns
}

#[tokio::test(start_paused = true)]
async fn a_queue_given_back_from_its_end_leaves_no_debt_behind() {
    // One token per second, burst 1: 500 turns reach 499 s ahead.
    let b = TokenBucket::new(BucketLimit::new(1, 1.0));
    let turns = reserve_many(&b, 500).await;
    assert!(
        turns[499].1 >= Duration::from_secs(498),
        "{:?}",
        turns[499].1
    );
    // All but the first five are given back (a scale-up to 500 and back to 5).
    for (turn, _) in turns.iter().skip(5).rev() {
        b.refund(*turn).await;
    }
    assert_eq!(b.free_slots().await, 0, "the freed tail is debt, not slots");
    // The next caller queues right behind the five that stay.
    let (_, wait) = b.reserve_turn().await;
    assert!(
        wait >= Duration::from_millis(4990) && wait <= Duration::from_millis(5010),
        "{wait:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_next_caller_takes_the_earliest_given_back_slot_and_nobody_is_double_booked() {
    let b = TokenBucket::new(BucketLimit::new(1, 1.0));
    let turns = reserve_many(&b, 100).await;
    // Most are given back, the last five stay: their slots are promised.
    for (turn, _) in &turns[1..95] {
        b.refund(*turn).await;
    }
    let (next, wait) = b.reserve_turn().await;
    assert_eq!(next.slot, turns[1].0.slot, "the earliest freed slot");
    assert!(wait <= Duration::from_millis(1010), "{wait:?}");
    // The next 93 callers take exactly the freed slots, in order; the one
    // after them queues behind the last promised turn.
    for (turn, _) in &turns[2..95] {
        assert_eq!(b.reserve_turn().await.0.slot, turn.slot);
    }
    let (after, _) = b.reserve_turn().await;
    assert!(after.slot > turns[99].0.slot, "no slot is handed out twice");
}

#[tokio::test(start_paused = true)]
async fn a_passed_turn_gives_its_token_back_while_the_queue_still_waits() {
    let b = TokenBucket::new(BucketLimit::new(1, 1.0));
    let turns = reserve_many(&b, 10).await; // slots 0 .. 9 s
    tokio::time::advance(Duration::from_millis(3500)).await;
    let before = b.wait_estimate().await;
    // The turn at 2 s was never spent: the queue moves up by one.
    b.refund(turns[2].0).await;
    let after = b.wait_estimate().await;
    assert!(
        before.saturating_sub(after) >= Duration::from_millis(990),
        "{before:?} -> {after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_passed_turn_gives_nothing_back_once_the_bucket_refilled() {
    let b = TokenBucket::new(BucketLimit::new(2, 1.0));
    let turns = reserve_many(&b, 4).await;
    tokio::time::advance(Duration::from_secs(60)).await;
    for (turn, _) in &turns {
        b.refund(*turn).await;
    }
    // The bucket holds its burst, no more: the late refunds add nothing.
    assert_eq!(b.reserve().await, Duration::ZERO);
    assert_eq!(b.reserve().await, Duration::ZERO);
    assert!(b.reserve().await >= Duration::from_millis(990));
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_that_passes_unused_still_shrinks_the_queue() {
    let b = TokenBucket::new(BucketLimit::new(1, 1.0));
    let turns = reserve_many(&b, 10).await; // slots 0 .. 9 s
    b.refund(turns[3].0).await; // ahead: kept as a slot
    assert_eq!(b.free_slots().await, 1);
    tokio::time::advance(Duration::from_secs(5)).await;
    // Nobody took it before it passed: it is given back to the debt.
    let est = b.wait_estimate().await;
    assert_eq!(b.free_slots().await, 0);
    assert!(est <= Duration::from_millis(4010), "{est:?}");
}
