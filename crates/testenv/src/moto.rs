//! The moto set-up of every AWS test (the provider's tests and the binary's
//! end-to-end tests): each test builds its own dual-stack VPC with one subnet,
//! a security group, an AMI and an instance profile, so that tests share one
//! moto and run side by side.
//!
//! It speaks EC2's and IAM's Query APIs over plain HTTP (moto does not check
//! signatures; the region is read from the credential scope), so neither this
//! crate nor a test crate that uses it builds `aws-sdk-ec2` for it.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the set-up created in moto, by ID (the profile by name).
#[derive(Clone, Debug)]
pub struct MotoNetwork {
    /// The VPC (10.0.0.0/16 and an Amazon-provided IPv6 /56).
    pub vpc: String,
    /// Its subnet in the region's zone `a` (10.0.1.0/24 and an IPv6 /64).
    pub subnet: String,
    /// A security group of the VPC.
    pub sg: String,
    /// A registered image (root device `/dev/xvda`).
    pub ami: String,
    /// An IAM instance profile's name (RunInstances needs one that exists).
    pub profile: String,
}

/// A moto call that did not give what the set-up needs.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    /// moto did not answer.
    #[error("moto at {endpoint}: {source}")]
    Io {
        /// The endpoint.
        endpoint: String,
        /// Why.
        source: std::io::Error,
    },
    /// moto answered with an error or without the field the set-up reads.
    #[error("moto {action}: no <{field}> in the answer: {answer}")]
    Answer {
        /// The Query API action.
        action: String,
        /// The field that was looked for.
        field: String,
        /// moto's answer, headers included.
        answer: String,
    },
}

/// The Query API version of EC2 the calls name.
const EC2_VERSION: &str = "2016-11-15";
/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl MotoNetwork {
    /// Creates the network, image and instance profile in `region`; the
    /// names (security group, image, profile) start with `prefix` and end
    /// with a suffix unique to this call.
    pub async fn create(
        endpoint: &str,
        region: &str,
        prefix: &str,
    ) -> Result<MotoNetwork, MotoError> {
        let ec2 = |body: String| query(endpoint, "ec2", region, body);
        let suffix = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
        let vpc = ec2(format!(
            "Action=CreateVpc&CidrBlock=10.0.0.0/16&AmazonProvidedIpv6CidrBlock=true&Version={EC2_VERSION}"
        ))
        .await?;
        let vpc_id = field("CreateVpc", &vpc, "vpcId")?;
        let v6 = field("CreateVpc", &vpc, "ipv6CidrBlock")?.replace("/56", "/64");
        let subnet = ec2(format!(
            "Action=CreateSubnet&VpcId={vpc_id}&CidrBlock=10.0.1.0/24&Ipv6CidrBlock={}\
             &AvailabilityZone={region}a&Version={EC2_VERSION}",
            form(&v6)
        ))
        .await?;
        let sg = ec2(format!(
            "Action=CreateSecurityGroup&GroupName={prefix}-sg-{suffix}&GroupDescription=mcm-test\
             &VpcId={vpc_id}&Version={EC2_VERSION}"
        ))
        .await?;
        let ami = ec2(format!(
            "Action=RegisterImage&Name={prefix}-ami-{suffix}&RootDeviceName={}&Version={EC2_VERSION}",
            form("/dev/xvda")
        ))
        .await?;
        let profile = format!("{prefix}-profile-{suffix}");
        let iam = query(
            endpoint,
            "iam",
            region,
            format!(
                "Action=CreateInstanceProfile&InstanceProfileName={profile}&Version=2010-05-08"
            ),
        )
        .await?;
        field("CreateInstanceProfile", &iam, "InstanceProfileName")?;
        Ok(MotoNetwork {
            vpc: vpc_id,
            subnet: field("CreateSubnet", &subnet, "subnetId")?,
            sg: field("CreateSecurityGroup", &sg, "groupId")?,
            ami: field("RegisterImage", &ami, "imageId")?,
            profile,
        })
    }
}

/// One unsigned Query API call (`service` is `ec2` or `iam`): moto's whole
/// answer, headers included.
pub async fn query(
    endpoint: &str,
    service: &str,
    region: &str,
    body: String,
) -> Result<String, MotoError> {
    let io = |source| MotoError::Io {
        endpoint: endpoint.to_string(),
        source,
    };
    let host = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20240101/{region}/{service}/aws4_request, \
         SignedHeaders=host, Signature=0\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let call = async {
        let mut stream = TcpStream::connect(&host).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    };
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(answer) => answer.map_err(io),
        Err(_) => Err(io(std::io::ErrorKind::TimedOut.into())),
    }
}

/// The text of the first `<tag>` of an answer.
pub fn field(action: &str, answer: &str, tag: &str) -> Result<String, MotoError> {
    let open = format!("<{tag}>");
    answer
        .split_once(&open)
        .and_then(|(_, rest)| rest.split_once(&format!("</{tag}>")))
        .map(|(text, _)| text.to_string())
        .filter(|_| answer.starts_with("HTTP/1.1 200"))
        .ok_or_else(|| MotoError::Answer {
            action: action.to_string(),
            field: tag.to_string(),
            answer: answer.to_string(),
        })
}

/// `value` form-encoded (the few characters the set-up's values carry).
fn form(value: &str) -> String {
    value
        .replace('%', "%25")
        .replace('/', "%2F")
        .replace(':', "%3A")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_read_from_a_successful_answer_only() {
        let ok = "HTTP/1.1 200 OK\r\n\r\n<a><vpcId>vpc-1</vpcId><vpcId>vpc-2</vpcId></a>";
        assert_eq!(field("CreateVpc", ok, "vpcId").expect("found"), "vpc-1");
        assert!(field("CreateVpc", ok, "subnetId").is_err());
        let refused = "HTTP/1.1 400 Bad Request\r\n\r\n<Errors><vpcId>x</vpcId></Errors>";
        let err = field("CreateVpc", refused, "vpcId").expect_err("an error answer");
        assert!(err.to_string().contains("400 Bad Request"), "{err}");
    }

    #[test]
    fn form_encoding_escapes_what_cidrs_and_device_names_carry() {
        assert_eq!(form("2600:1f::/64"), "2600%3A1f%3A%3A%2F64");
        assert_eq!(form("/dev/xvda"), "%2Fdev%2Fxvda");
    }

    #[tokio::test]
    async fn the_network_exists_in_moto_after_create() {
        let Some(endpoint) = crate::moto_endpoint(&crate::current_test()) else {
            return;
        };
        let net = MotoNetwork::create(&endpoint, "eu-west-1", "testenv")
            .await
            .expect("set-up");
        let subnets = query(
            &endpoint,
            "ec2",
            "eu-west-1",
            format!(
                "Action=DescribeSubnets&SubnetId.1={}&Version={EC2_VERSION}",
                net.subnet
            ),
        )
        .await
        .expect("DescribeSubnets");
        assert_eq!(
            field("DescribeSubnets", &subnets, "vpcId").expect("vpc"),
            net.vpc
        );
        assert!(subnets.contains("<ipv6CidrBlock>"), "{subnets}");
        assert!(net.ami.starts_with("ami-"), "{net:?}");
        assert!(net.sg.starts_with("sg-"), "{net:?}");
    }
}
