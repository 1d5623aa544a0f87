//! SDK clients and token buckets per account (credentials) and region,
//! bounded caches of both.

use super::AwsDriver;
use crate::ec2::Ec2;
use crate::spec::{credentials, validate_secret, Credentials};
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{BehaviorVersion, Region};
use k8s_openapi::api::core::v1::Secret;
use mcm_driver::provider_spec::{Join, SecretData, SecretUse};
use mcm_driver::Status;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

/// How many credentials (region and identity) the client and limiter caches hold at most.
const CLIENT_CACHE_CAP: usize = 64;

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct ClientKey {
    region: String,
    identity: String,
    secret_hash: u64,
}

impl AwsDriver {
    /// The SDK client the driver uses for a region and secret (e.g. for test
    /// set-up against an emulator). Shares the driver's HTTP client and counters.
    pub fn ec2_client(&self, region: &str, secret: &Secret) -> Result<aws_sdk_ec2::Client, Status> {
        let errs = validate_secret(SecretData(secret), SecretUse::Existing);
        if !errs.is_empty() {
            return Err(Status::invalid_argument(Join::Aggregate.apply(&errs)));
        }
        Ok(self.ec2(region, &credentials(secret))?.client().clone())
    }

    pub(super) fn ec2(&self, region: &str, creds: &Credentials) -> Result<Arc<Ec2>, Status> {
        let (identity, secret_hash) = match creds {
            Credentials::Static {
                access_key_id,
                secret_access_key,
            } => {
                let mut h = DefaultHasher::new();
                secret_access_key.hash(&mut h);
                (access_key_id.clone(), h.finish())
            }
            Credentials::WebIdentity {
                token_file,
                role_arn,
            } => {
                let mut h = DefaultHasher::new();
                token_file.hash(&mut h);
                (role_arn.clone(), h.finish())
            }
        };
        let key = ClientKey {
            region: region.to_string(),
            identity: identity.clone(),
            secret_hash,
        };
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| Status::internal("AWS client cache lock poisoned"))?;
        if let Some(c) = clients.get(&key) {
            return Ok(Arc::clone(c));
        }
        let limiter = {
            let mut limiters = self
                .limiters
                .lock()
                .map_err(|_| Status::internal("AWS limiter cache lock poisoned"))?;
            if limiters.len() >= CLIENT_CACHE_CAP
                && !limiters.contains_key(&(region.to_string(), identity.clone()))
            {
                // Start afresh (clients in use keep their limiters).
                limiters.clear();
            }
            Arc::clone(
                limiters
                    .entry((region.to_string(), identity))
                    .or_insert_with(|| {
                        Arc::new(crate::ratelimit::limiter(&self.config.rate_limits))
                    }),
            )
        };
        let client = self.build_client(region, creds);
        let ec2 = Arc::new(Ec2::new(client, limiter, &self.config));
        // A rotated secret replaces the identity's old client; beyond
        // CLIENT_CACHE_CAP identities the cache starts afresh (calls in flight
        // keep their clients), so that it never grows without bound.
        clients.retain(|k, _| !(k.region == key.region && k.identity == key.identity));
        if clients.len() >= CLIENT_CACHE_CAP {
            clients.clear();
        }
        clients.insert(key, Arc::clone(&ec2));
        Ok(ec2)
    }

    pub(super) fn build_client(&self, region: &str, creds: &Credentials) -> aws_sdk_ec2::Client {
        let r = &self.config.retry;
        let mut b = aws_sdk_ec2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .http_client(self.http.clone())
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(r.sdk_max_attempts.max(1))
                    .with_initial_backoff(r.sdk_initial_backoff)
                    .with_max_backoff(r.sdk_max_backoff),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(self.config.attempt_timeout)
                    .build(),
            )
            .interceptor(self.calls.clone())
            .interceptor(crate::cloud_metrics::CloudApiMetrics {
                api: self.cloud_api.clone(),
            });
        b = match creds {
            Credentials::Static {
                access_key_id,
                secret_access_key,
            } => b.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                access_key_id,
                secret_access_key,
                None,
                None,
                "mcm-provider-aws-secret",
            )),
            Credentials::WebIdentity {
                token_file,
                role_arn,
            } => {
                let conf = aws_config::provider_config::ProviderConfig::without_region()
                    .with_region(Some(Region::new(region.to_string())))
                    .with_http_client(self.http.clone());
                b.credentials_provider(
                    aws_config::web_identity_token::WebIdentityTokenCredentialsProvider::builder()
                        .static_configuration(aws_config::web_identity_token::StaticConfiguration {
                            web_identity_token_file: token_file.into(),
                            role_arn: role_arn.clone(),
                            session_name: "mcm-provider-aws".to_string(),
                        })
                        .configure(&conf)
                        .build(),
                )
            }
        };
        if let Some(url) = &self.config.endpoint_url {
            b = b.endpoint_url(url);
        }
        if let Some(hook) = &self.config.sdk_config_hook {
            b = hook(b);
        }
        aws_sdk_ec2::Client::from_conf(b.build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AwsDriverConfig;

    fn static_creds(id: &str, secret: &str) -> Credentials {
        Credentials::Static {
            access_key_id: id.into(),
            secret_access_key: secret.into(),
        }
    }

    #[test]
    fn the_client_cache_keeps_one_client_per_identity_and_stays_bounded() {
        let d = AwsDriver::new(AwsDriverConfig::default());
        let len = |d: &AwsDriver| d.clients.lock().map(|c| c.len()).unwrap_or(usize::MAX);
        let first = d
            .ec2("eu-west-1", &static_creds("AKIA1", "s1"))
            .expect("client");
        let again = d
            .ec2("eu-west-1", &static_creds("AKIA1", "s1"))
            .expect("client");
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same credentials share a client"
        );
        // A rotated secret replaces the identity's client instead of adding one.
        d.ec2("eu-west-1", &static_creds("AKIA1", "s2"))
            .expect("client");
        assert_eq!(len(&d), 1);
        // Ever new identities: the cache never exceeds its cap.
        for i in 0..(3 * CLIENT_CACHE_CAP) {
            d.ec2("eu-west-1", &static_creds(&format!("AKIA-{i}"), "s"))
                .expect("client");
            assert!(len(&d) <= CLIENT_CACHE_CAP);
            let limiters = d.limiters.lock().map(|l| l.len()).unwrap_or(usize::MAX);
            assert!(limiters <= CLIENT_CACHE_CAP, "{limiters} limiters");
        }
    }
}
