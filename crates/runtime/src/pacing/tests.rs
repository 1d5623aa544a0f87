use super::*;
use crate::keys::{Kind, ObjectKey};

/// The key of the Machine `namespace/name`.
fn k(key: &str) -> ObjectKey {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    ObjectKey::new(Kind::Machine, ns, name)
}
use async_trait::async_trait;
use mcm_driver::budget::BucketLimit;
use mcm_driver::*;

/// A driver that only declares limits: create bursts 3, then one per 4 s
/// (the pacer keeps one of the burst back and runs 3 % slower).
struct Limited;

#[async_trait]
impl Driver for Limited {
    async fn create_machine(
        &self,
        _: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn delete_machine(
        &self,
        _: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn get_machine_status(
        &self,
        _: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn list_machines(&self, _: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn rate_limits(&self) -> Vec<(CloudOp, BucketLimit)> {
        vec![(CloudOp::Create, BucketLimit::new(3, 0.25))]
    }
}

/// A request for machine `m` of class `c` (also used by the metrics tests).
pub(crate) fn req() -> MachineRequest {
    MachineRequest {
        machine: serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m"}, "spec": {"class": {"name": "c"}}
        }))
        .unwrap(),
        machine_class: serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "c"}, "providerSpec": {}
        }))
        .unwrap(),
        secret: Default::default(),
    }
}

fn all(_: &ObjectKey) -> bool {
    true
}

#[tokio::test(start_paused = true)]
async fn the_burst_goes_at_once_then_machines_queue_in_order_without_holding_a_worker() {
    let p = Pacer::new();
    let d = Limited;
    for key in ["ns/a", "ns/b"] {
        assert_eq!(
            p.admit(&k(key), "x", &d, &req(), CloudOp::Create, all)
                .await,
            Admission::Go
        );
    }
    let Admission::Wait(c) = p
        .admit(&k("ns/c"), "x", &d, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("the third create must wait");
    };
    let Admission::Wait(e) = p
        .admit(&k("ns/e"), "x", &d, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("the fourth create must wait");
    };
    assert!(
        c >= Duration::from_secs(4) && c <= Duration::from_secs(5),
        "{c:?}"
    );
    assert!(
        e > c + Duration::from_secs(3),
        "served in order: {c:?} then {e:?}"
    );
    // Asking again before its turn keeps the machine's place (no new token).
    let Admission::Wait(again) = p
        .admit(&k("ns/c"), "x", &d, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("still before its turn");
    };
    assert!(again <= c);
    tokio::time::advance(c).await;
    assert_eq!(
        p.admit(&k("ns/c"), "x", &d, &req(), CloudOp::Create, all)
            .await,
        Admission::Go
    );
}

#[tokio::test(start_paused = true)]
async fn operations_without_a_declared_limit_are_never_paced() {
    let p = Pacer::new();
    for i in 0..50 {
        let key = format!("ns/m{i}");
        assert_eq!(
            p.admit(&k(&key), "x", &Limited, &req(), CloudOp::Status, all)
                .await,
            Admission::Go
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_throttled_answer_pauses_the_operation_for_everyone() {
    let p = Pacer::new();
    let d = Limited;
    assert_eq!(
        p.admit(&k("ns/a"), "x", &d, &req(), CloudOp::Create, all)
            .await,
        Admission::Go
    );
    p.answered("x", &d, &req(), CloudOp::Create, true).await;
    // The bucket still had a token, but the pause holds it back.
    assert!(matches!(
        p.admit(&k("ns/b"), "x", &d, &req(), CloudOp::Create, all)
            .await,
        Admission::Wait(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_status_probe_before_the_create_keeps_the_machines_create_turn() {
    let p = Pacer::new();
    let d = Limited;
    for key in ["ns/a", "ns/b"] {
        assert_eq!(
            p.admit(&k(key), "x", &d, &req(), CloudOp::Create, all)
                .await,
            Admission::Go
        );
    }
    let Admission::Wait(turn) = p
        .admit(&k("ns/c"), "x", &d, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("the third create must wait");
    };
    // Its next reconcile probes first (no limit on status) ...
    assert_eq!(
        p.admit(&k("ns/c"), "x", &d, &req(), CloudOp::Status, all)
            .await,
        Admission::Go
    );
    // ... and still finds its create turn, not a later one: a machine that
    // comes back for its turn never pushes it further out.
    let Admission::Wait(again) = p
        .admit(&k("ns/c"), "x", &d, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("still before its turn");
    };
    assert!(again <= turn, "{again:?} > {turn:?}");
}

#[tokio::test(start_paused = true)]
async fn machines_that_come_back_long_after_their_turn_queue_again_instead_of_bursting() {
    let p = Pacer::new();
    let d = Limited;
    for key in ["ns/a", "ns/b"] {
        assert_eq!(
            p.admit(&k(key), "x", &d, &req(), CloudOp::Create, all)
                .await,
            Admission::Go
        );
    }
    let mut turns = Vec::new();
    for key in ["ns/c", "ns/e", "ns/f"] {
        let Admission::Wait(t) = p
            .admit(&k(key), "x", &d, &req(), CloudOp::Create, all)
            .await
        else {
            panic!("{key} must wait");
        };
        turns.push(t);
    }
    // All three come back a minute late, together: at most the bucket's
    // burst (2 of 3, one kept back) goes at once, the rest queues again.
    tokio::time::advance(Duration::from_secs(60)).await;
    let mut went = 0;
    for key in ["ns/c", "ns/e", "ns/f"] {
        if p.admit(&k(key), "x", &d, &req(), CloudOp::Create, all)
            .await
            == Admission::Go
        {
            went += 1;
        }
    }
    assert_eq!(went, 2, "turns were {turns:?}");
}

/// One turn of [`Limited`] as the pacer runs it (0.25/s at 97 %).
fn period() -> Duration {
    Duration::from_secs_f64(1.0 / (0.25 * RATE_MARGIN))
}

/// Admits `keys` for a create: returns their waits (zero: went at once).
async fn admit_all(p: &Pacer, keys: &[String]) -> Vec<Duration> {
    let mut waits = Vec::new();
    for key in keys {
        waits.push(
            match p
                .admit(&k(key), "x", &Limited, &req(), CloudOp::Create, all)
                .await
            {
                Admission::Go => Duration::ZERO,
                Admission::Wait(w) => w,
            },
        );
    }
    waits
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("ns/{prefix}{i}")).collect()
}

#[tokio::test(start_paused = true)]
async fn turns_of_forgotten_machines_go_back_so_the_next_machine_goes_near_now() {
    let p = Pacer::new();
    // A scale-up to 100 machines: 2 go at once, 98 queue for ~400 s.
    let up = keys("m", 100);
    let waits = admit_all(&p, &up).await;
    assert!(waits[99] > period() * 90, "{:?}", waits[99]);
    assert_eq!(p.reserved_turns(), 98);
    // Scaled back to 5: the 95 deleted machines give their turns back.
    for key in &up[5..] {
        p.forget(&k(key)).await;
    }
    assert_eq!(p.reserved_turns(), 3);
    // A replacement queues behind the 3 that still wait, not behind 98.
    let Admission::Wait(w) = p
        .admit(&k("ns/new"), "x", &Limited, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("the queue still holds 3 turns");
    };
    assert!(w <= period() * 4 + Duration::from_millis(10), "{w:?}");
}

#[tokio::test(start_paused = true)]
async fn a_deleted_machines_create_turn_goes_to_the_next_machine() {
    let p = Pacer::new();
    let waits = admit_all(&p, &keys("m", 10)).await;
    assert!(waits[9] > period() * 7);
    p.give_back(&k("ns/m9"), &[CloudOp::Create, CloudOp::Initialize])
        .await;
    assert_eq!(p.turn(&k("ns/m9"), CloudOp::Create), None);
    let Admission::Wait(w) = p
        .admit(&k("ns/new"), "x", &Limited, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("must wait");
    };
    // It takes m9's place at the end, not the place after it.
    assert!(
        w <= waits[9] + Duration::from_millis(10),
        "{w:?} vs {:?}",
        waits[9]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stale_turn_is_given_back_and_the_queue_moves_up() {
    let p = Pacer::new();
    let waits = admit_all(&p, &keys("m", 12)).await;
    // m2 (the first to wait) never comes back for its turn.
    tokio::time::advance(waits[2] + STALE + Duration::from_millis(100)).await;
    let Admission::Wait(w) = p
        .admit(&k("ns/new"), "x", &Limited, &req(), CloudOp::Create, all)
        .await
    else {
        panic!("must wait");
    };
    assert_eq!(
        p.turn(&k("ns/m2"), CloudOp::Create),
        None,
        "stale turn swept"
    );
    // Without the refund it would queue one period after m11.
    let elapsed = waits[2] + STALE + Duration::from_millis(100);
    let behind_m11 = waits[11] + period() - elapsed;
    assert!(
        w + period() - Duration::from_millis(50) <= behind_m11,
        "{w:?} vs {behind_m11:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn pruned_entries_give_their_turns_back() {
    use crate::pruned::MIN_HIGH_WATER;
    let p = Pacer::new();
    // Enough waiting machines to reach the high-water mark, then they are
    // all deleted behind the pacer's back (no forget).
    let old = keys("old", MIN_HIGH_WATER + 2);
    admit_all(&p, &old).await;
    assert_eq!(p.reserved_turns(), MIN_HIGH_WATER);
    let live = |k: &ObjectKey| !k.name.starts_with("old");
    let Admission::Wait(w) = p
        .admit(&k("ns/new"), "x", &Limited, &req(), CloudOp::Create, live)
        .await
    else {
        panic!("the burst was spent");
    };
    assert_eq!(p.reserved_turns(), 1, "only the new machine's turn");
    assert!(w <= period() + Duration::from_millis(10), "{w:?}");
}

/// A driver that declares no limits until it is "ready" (an out-of-process
/// driver before its Info answered).
struct LateLimits(std::sync::atomic::AtomicBool);

#[async_trait]
impl Driver for LateLimits {
    async fn create_machine(
        &self,
        _: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn delete_machine(
        &self,
        _: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn get_machine_status(
        &self,
        _: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn list_machines(&self, _: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        Err(Status::unimplemented("not called"))
    }
    async fn rate_limits(&self) -> Vec<(CloudOp, BucketLimit)> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            vec![(CloudOp::Create, BucketLimit::new(2, 0.25))]
        } else {
            Vec::new()
        }
    }
}

#[tokio::test(start_paused = true)]
async fn limits_registered_after_the_first_call_replace_the_empty_budget() {
    let p = Pacer::new();
    let d = LateLimits(std::sync::atomic::AtomicBool::new(false));
    for key in ["ns/a", "ns/b", "ns/c"] {
        assert_eq!(
            p.admit(&k(key), "x", &d, &req(), CloudOp::Create, all)
                .await,
            Admission::Go,
            "no limits declared yet"
        );
    }
    d.0.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(p.register("x", &d).await, 1);
    // Burst 2, less the one the pacer keeps back: one goes, the next waits.
    assert_eq!(
        p.admit(&k("ns/d"), "x", &d, &req(), CloudOp::Create, all)
            .await,
        Admission::Go
    );
    assert!(matches!(
        p.admit(&k("ns/e"), "x", &d, &req(), CloudOp::Create, all)
            .await,
        Admission::Wait(_)
    ));
}
