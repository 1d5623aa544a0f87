//! The ACS3-HMAC-SHA256 request signature (Alibaba Cloud "signature method V3").
//!
//! The signature covers a canonical request made of the method, the path, the
//! sorted and percent-encoded query, the signed headers (`host` and every
//! `x-acs-*` header, lower-cased and sorted) and the SHA-256 of the body:
//!
//! ```text
//! CanonicalRequest = Method \n Path \n CanonicalQuery \n CanonicalHeaders \n SignedHeaders \n HexSha256(Body)
//! StringToSign     = "ACS3-HMAC-SHA256" \n HexSha256(CanonicalRequest)
//! Signature        = Hex(HMAC-SHA256(AccessKeySecret, StringToSign))
//! Authorization    = ACS3-HMAC-SHA256 Credential=<AccessKeyId>,SignedHeaders=<h1;h2;...>,Signature=<sig>
//! ```
//!
//! Percent-encoding is RFC 3986 (unreserved `A-Z a-z 0-9 - _ . ~` kept, space
//! as `%20`), the same for query keys, values and form bodies.

use hmac::{Hmac, KeyInit, Mac};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};

/// The signature algorithm name.
pub const ALGORITHM: &str = "ACS3-HMAC-SHA256";

/// Everything but the RFC 3986 unreserved characters is encoded.
const RFC3986: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// RFC 3986 percent-encoding, as the V3 signature wants it.
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, RFC3986).to_string()
}

/// Hex-encoded SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// `key=value&...` of percent-encoded pairs sorted by key (then value): the
/// canonical query string, and also the form body the client sends.
pub fn canonical_query<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut pairs: Vec<(String, String)> = params
        .into_iter()
        .map(|(k, v)| (percent_encode(k), percent_encode(v)))
        .collect();
    pairs.sort();
    pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The parts of a request that the signature covers.
#[derive(Debug, Clone)]
pub struct SigningInput<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// The path, `/` for RPC APIs.
    pub path: &'a str,
    /// The canonical query string (see [`canonical_query`]).
    pub canonical_query: &'a str,
    /// The headers to sign, any case; sorted and lower-cased here.
    pub headers: &'a [(&'a str, &'a str)],
    /// Hex SHA-256 of the body (the `x-acs-content-sha256` header).
    pub hashed_payload: &'a str,
}

/// The signed header names (lower-case, sorted, `;`-joined) and the canonical request.
pub fn canonical_request(input: &SigningInput<'_>) -> (String, String) {
    let mut headers: Vec<(String, String)> = input
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed = headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        input.method,
        input.path,
        input.canonical_query,
        canonical_headers,
        signed,
        input.hashed_payload
    );
    (signed, request)
}

/// The hex HMAC-SHA256 signature of a canonical request.
pub fn signature(secret: &str, canonical_request: &str) -> String {
    let string_to_sign = format!("{ALGORITHM}\n{}", sha256_hex(canonical_request.as_bytes()));
    // HMAC accepts keys of any length, so this never fails.
    let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(string_to_sign.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The `Authorization` header value for a request.
pub fn authorization(access_key_id: &str, secret: &str, input: &SigningInput<'_>) -> String {
    let (signed, request) = canonical_request(input);
    format!(
        "{ALGORITHM} Credential={access_key_id},SignedHeaders={signed},Signature={}",
        signature(secret, &request)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Alibaba's documented V3 example ("Request syntax and signature method
    /// V3", signature example): RunInstances in cn-shanghai, no body.
    #[test]
    fn signs_alibabas_documented_v3_example() {
        let empty = sha256_hex(b"");
        assert_eq!(
            empty,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let query = canonical_query([
            ("RegionId", "cn-shanghai"),
            (
                "ImageId",
                "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd",
            ),
        ]);
        assert_eq!(
            query,
            "ImageId=win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd&RegionId=cn-shanghai"
        );
        let headers = [
            ("host", "ecs.cn-shanghai.aliyuncs.com"),
            ("x-acs-action", "RunInstances"),
            ("x-acs-version", "2014-05-26"),
            ("x-acs-date", "2023-10-26T10:22:32Z"),
            ("x-acs-signature-nonce", "3156853299f313e23d1673dc12e1703d"),
            ("x-acs-content-sha256", empty.as_str()),
        ];
        let input = SigningInput {
            method: "POST",
            path: "/",
            canonical_query: &query,
            headers: &headers,
            hashed_payload: &empty,
        };
        let (signed, request) = canonical_request(&input);
        assert_eq!(
            signed,
            "host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version"
        );
        assert_eq!(
            sha256_hex(request.as_bytes()),
            "7ea06492da5221eba5297e897ce16e55f964061054b7695beedaac1145b1e259"
        );
        assert_eq!(
            authorization("YourAccessKeyId", "YourAccessKeySecret", &input),
            "ACS3-HMAC-SHA256 Credential=YourAccessKeyId,SignedHeaders=host;x-acs-action;\
             x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,\
             Signature=06563a9e1b43f5dfe96b81484da74bceab24a1d853912eee15083a6f0f3283c0"
        );
    }

    #[test]
    fn percent_encoding_is_rfc3986() {
        assert_eq!(percent_encode("a b*c~d/e+f=g"), "a%20b%2Ac~d%2Fe%2Bf%3Dg");
        assert_eq!(
            percent_encode("kubernetes.io/role/node"),
            "kubernetes.io%2Frole%2Fnode"
        );
        assert_eq!(percent_encode("中"), "%E4%B8%AD");
    }

    #[test]
    fn canonical_query_sorts_encoded_keys() {
        assert_eq!(
            canonical_query([
                ("Tag.2.Key", "b"),
                ("Tag.10.Key", "c"),
                ("Tag.1.Key", "a b")
            ]),
            "Tag.1.Key=a%20b&Tag.10.Key=c&Tag.2.Key=b"
        );
    }
}
