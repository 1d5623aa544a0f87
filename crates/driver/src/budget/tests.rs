use super::*;

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
