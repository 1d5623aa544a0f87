//! OpenStack API calls per machine, counted by the fake (every HTTP request)
//! and by the driver (per operation): the figures of the README.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::{class, env, machine};
use mcm_driver::Driver;
use std::collections::BTreeMap;

fn diff(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[tokio::test]
async fn api_calls_per_machine_with_cached_look_ups() {
    let env = env().await;
    let c = class("c", env.spec());
    // The first machine pays for the session (token, version discovery) and the look-ups.
    let before = env.fake.calls();
    let mut first = env.request(&c, machine("calls"));
    first.machine.spec.provider_id = env
        .driver
        .create_machine(&first)
        .await
        .expect("create")
        .provider_id;
    let first_create = diff(&env.fake.calls(), &before);
    // Further machines of the class reuse the session and the cached flavor, image and group IDs.
    let before = env.fake.calls();
    let mut second = env.request(&c, machine("calls"));
    second.machine.spec.provider_id = env
        .driver
        .create_machine(&second)
        .await
        .expect("create")
        .provider_id;
    let create = diff(&env.fake.calls(), &before);
    let before = env.fake.calls();
    env.driver.delete_machine(&second).await.expect("delete");
    let delete = diff(&env.fake.calls(), &before);
    let before = env.fake.calls();
    env.driver.get_machine_status(&first).await.expect("status");
    let status = diff(&env.fake.calls(), &before);
    eprintln!("first create (session + look-ups): {first_create:?}");
    eprintln!(
        "create (warm): {create:?} = {}",
        create.values().sum::<u64>()
    );
    eprintln!("delete: {delete:?} = {}", delete.values().sum::<u64>());
    eprintln!("status by provider ID: {status:?}");
    eprintln!("driver counts: {:?}", env.driver.api_calls());
    for cached in [
        "nova.flavors.list",
        "nova.images.list",
        "neutron.security-groups.list",
        "keystone.tokens.create",
    ] {
        assert!(
            !create.contains_key(cached),
            "{cached} is cached: {create:?}"
        );
    }
    // port list + subnet + port create + tag + server list + create + get + port list + address pairs
    assert_eq!(create.values().sum::<u64>(), 9, "{create:?}");
    // server get, delete, get (gone), port list + delete
    assert_eq!(delete.values().sum::<u64>(), 5, "{delete:?}");
    assert_eq!(status.values().sum::<u64>(), 1, "{status:?}");
}
