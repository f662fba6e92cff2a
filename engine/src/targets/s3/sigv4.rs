//! AWS Signature Version 4 for S3 requests (header form), on ring's
//! HMAC-SHA256 and SHA-256 (the TLS provider's crypto, so one crypto
//! library). The signing key depends on the day and region only, so it is
//! derived once a day per signer; a request then costs one SHA-256 of its
//! canonical request (~300 bytes) and one HMAC.
//!
//! The secret key is held here and nowhere else: it is never formatted,
//! logged or echoed (no Debug).

use ring::{digest, hmac};

/// `x-amz-content-sha256` for a body that is not hashed.
pub const UNSIGNED: &str = "UNSIGNED-PAYLOAD";
/// SHA-256 of the empty body.
#[cfg(test)]
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

#[derive(Clone)]
pub struct Signer {
    access_key: String,
    secret_key: String,
    region: String,
    /// (yyyymmdd, signing key) of the last request.
    cached: Option<(String, hmac::Key)>,
}

pub fn hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(D[(b >> 4) as usize] as char);
        s.push(D[(b & 15) as usize] as char);
    }
    s
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

fn hmac_sign(key: &[u8], msg: &[u8]) -> hmac::Tag {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), msg)
}

/// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request").
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac_sign(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac_sign(k_date.as_ref(), region.as_bytes());
    let k_service = hmac_sign(k_region.as_ref(), service.as_bytes());
    let k = hmac_sign(k_service.as_ref(), b"aws4_request");
    let mut out = [0u8; 32];
    out.copy_from_slice(k.as_ref());
    out
}

/// The canonical request. `headers`: (lowercase name, value) sorted by name,
/// values already trimmed; `uri` and `query` already in canonical (encoded,
/// sorted) form.
pub fn canonical_request(
    method: &str,
    uri: &str,
    query: &str,
    headers: &[(&str, &str)],
    payload_hash: &str,
) -> (String, String) {
    let mut signed = String::with_capacity(64);
    let mut c = String::with_capacity(256);
    c.push_str(method);
    c.push('\n');
    c.push_str(uri);
    c.push('\n');
    c.push_str(query);
    c.push('\n');
    for (i, (k, v)) in headers.iter().enumerate() {
        c.push_str(k);
        c.push(':');
        c.push_str(v);
        c.push('\n');
        if i > 0 {
            signed.push(';');
        }
        signed.push_str(k);
    }
    c.push('\n');
    c.push_str(&signed);
    c.push('\n');
    c.push_str(payload_hash);
    (c, signed)
}

pub fn string_to_sign(amz_date: &str, scope: &str, canonical: &str) -> String {
    format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", sha256_hex(canonical.as_bytes()))
}

impl Signer {
    pub fn new(access_key: String, secret_key: String, region: String) -> Self {
        Signer { access_key, secret_key, region, cached: None }
    }

    /// The `Authorization` header value for a request carrying `headers`
    /// (lowercase names, sorted, `host`, `x-amz-content-sha256` and
    /// `x-amz-date` among them) at `amz_date` (yyyymmddThhmmssZ).
    pub fn authorization(
        &mut self,
        method: &str,
        uri: &str,
        query: &str,
        headers: &[(&str, &str)],
        payload_hash: &str,
        amz_date: &str,
    ) -> String {
        let date = &amz_date[..8];
        if self.cached.as_ref().is_none_or(|(d, _)| d != date) {
            let k = signing_key(&self.secret_key, date, &self.region, "s3");
            self.cached = Some((date.to_string(), hmac::Key::new(hmac::HMAC_SHA256, &k)));
        }
        let key = &self.cached.as_ref().expect("just set").1;
        let (canonical, signed) = canonical_request(method, uri, query, headers, payload_hash);
        let scope = format!("{date}/{}/s3/aws4_request", self.region);
        let sts = string_to_sign(amz_date, &scope, &canonical);
        let sig = hex(hmac::sign(key, sts.as_bytes()).as_ref());
        format!("AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={sig}", self.access_key)
    }
}

/// `yyyymmddThhmmssZ` (UTC) of Unix time `secs`, without a calendar library.
pub fn amz_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// S3's URI encoding of one query value or key part: unreserved characters
/// stay, everything else is %XX (uppercase), '/' included.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // AWS's published examples ("Signature Calculations for the Authorization
    // Header", S3 API reference; and the general SigV4 signing-key example).
    const KEY: &str = "AKIAIOSFODNN7EXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const HOST: &str = "examplebucket.s3.amazonaws.com";
    const AT: &str = "20130524T000000Z";

    fn signer() -> Signer {
        Signer::new(KEY.into(), SECRET.into(), "us-east-1".into())
    }

    #[test]
    fn signing_key_matches_the_published_derivation() {
        let k = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830", "us-east-1", "iam");
        assert_eq!(hex(&k), "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
    }

    #[test]
    fn get_object_example() {
        let headers =
            [("host", HOST), ("range", "bytes=0-9"), ("x-amz-content-sha256", EMPTY_SHA256), ("x-amz-date", AT)];
        let (c, signed) = canonical_request("GET", "/test.txt", "", &headers, EMPTY_SHA256);
        assert_eq!(
            c,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n\
             x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
             x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(signed, "host;range;x-amz-content-sha256;x-amz-date");
        let sts = string_to_sign(AT, "20130524/us-east-1/s3/aws4_request", &c);
        assert_eq!(
            sts,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
             7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
        );
        let auth = signer().authorization("GET", "/test.txt", "", &headers, EMPTY_SHA256, AT);
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn put_object_example_with_a_signed_payload() {
        let body = sha256_hex(b"Welcome to Amazon S3.");
        assert_eq!(body, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
        let uri = format!("/{}", encode("test$file.text"));
        assert_eq!(uri, "/test%24file.text");
        let headers = [
            ("date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("host", HOST),
            ("x-amz-content-sha256", body.as_str()),
            ("x-amz-date", AT),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ];
        let (c, _) = canonical_request("PUT", &uri, "", &headers, &body);
        assert_eq!(sha256_hex(c.as_bytes()), "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
        let auth = signer().authorization("PUT", &uri, "", &headers, &body, AT);
        assert!(auth.ends_with("Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"), "{auth}");
    }

    #[test]
    fn bucket_examples_with_query_strings() {
        let headers = [("host", HOST), ("x-amz-content-sha256", EMPTY_SHA256), ("x-amz-date", AT)];
        let mut s = signer();
        let auth = s.authorization("GET", "/", "lifecycle=", &headers, EMPTY_SHA256, AT);
        assert!(auth.ends_with("Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"), "{auth}");
        // The cached signing key gives the same answer as a fresh one.
        let auth = s.authorization("GET", "/", "max-keys=2&prefix=J", &headers, EMPTY_SHA256, AT);
        assert!(auth.ends_with("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"), "{auth}");
    }

    #[test]
    fn dates_and_encoding() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(1_709_251_199), "20240229T235959Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
        assert_eq!(encode("run1/0/ a~"), "run1%2F0%2F%20a~");
    }
}
