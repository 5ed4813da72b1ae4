//! Signing packages as the world signs them: upstream's `cosign` (built by
//! hack/build-binaries.sh from the Go module proxy) makes key pairs, signs
//! and attests images in the test registry, offline (no transparency log
//! upload, the registry trusted by its CA alone).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn cosign(work: &Path) -> Command {
    let mut c = Command::new(
        testenv::bin_dir()
            .expect("CROSSPLANE_RS_BIN (hack/build-binaries.sh)")
            .join("cosign"),
    );
    // No password on the keys, no state outside the work directory, and
    // nothing sent anywhere but the registry.
    c.env("COSIGN_PASSWORD", "")
        .env("TUF_ROOT", work.join("tuf"))
        .env("HOME", work)
        .current_dir(work);
    c
}

fn run(what: &str, mut cmd: Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run cosign: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A key pair made by `cosign generate-key-pair` in `work`: (private key
/// file, public key PEM).
pub fn key_pair(work: &Path, name: &str) -> (PathBuf, String) {
    std::fs::create_dir_all(work).unwrap();
    let mut c = cosign(work);
    c.args(["generate-key-pair", "--output-key-prefix", name]);
    run("cosign generate-key-pair", c);
    let public = std::fs::read_to_string(work.join(format!("{name}.pub"))).unwrap();
    (work.join(format!("{name}.key")), public)
}

/// `cosign sign --key KEY IMAGE` (`image` by digest), trusting `ca_file`.
pub fn sign(work: &Path, key: &Path, image: &str, ca_file: &Path) {
    let mut c = cosign(work);
    c.args(["sign", "--tlog-upload=false", "-y", "--key"])
        .arg(key)
        .arg("--registry-cacert")
        .arg(ca_file)
        .arg(image);
    run(&format!("cosign sign {image}"), c);
}

/// `cosign attest --key KEY --type TYPE --predicate FILE IMAGE`, trusting
/// `ca_file`.
pub fn attest(work: &Path, key: &Path, image: &str, type_: &str, ca_file: &Path) {
    let predicate = work.join("predicate.json");
    std::fs::write(&predicate, r#"{"built-by": "crossplane-rs e2e"}"#).unwrap();
    let mut c = cosign(work);
    c.args([
        "attest",
        "--tlog-upload=false",
        "-y",
        "--type",
        type_,
        "--key",
    ])
    .arg(key)
    .arg("--predicate")
    .arg(&predicate)
    .arg("--registry-cacert")
    .arg(ca_file)
    .arg(image);
    run(&format!("cosign attest {image}"), c);
}

/// A private keyless authority: a certificate authority made here (as an
/// organisation's own Fulcio would be), and the Sigstore trusted root
/// upstream's `cosign trusted-root create` writes for it.
pub struct Authority {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    ca_file: PathBuf,
    /// `trusted_root.json` for this authority alone.
    pub trusted_root: String,
}

/// Fulcio's OIDC issuer extension (v2: a DER UTF8String).
const FULCIO_ISSUER: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 8];

impl Authority {
    /// A new authority named `name`, its files in `work`.
    pub fn new(work: &Path, name: &str) -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        std::fs::create_dir_all(work).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} keyless CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca_file = work.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let out = work.join(format!("{name}-trusted-root.json"));
        let mut c = cosign(work);
        c.args(["trusted-root", "create"])
            .arg(format!(
                "--fulcio=url=https://fulcio.{name}.example,certificate-chain={}",
                ca_file.display()
            ))
            .arg("--out")
            .arg(&out);
        run("cosign trusted-root create", c);
        Self {
            ca,
            ca_file,
            trusted_root: std::fs::read_to_string(out).unwrap(),
        }
    }

    /// A code-signing certificate this authority issues to `subject` (an
    /// e-mail) as the OIDC issuer `issuer` vouched for it, and its key as
    /// `cosign import-key-pair` keeps it: (key file, certificate file).
    pub fn certificate(
        &self,
        work: &Path,
        name: &str,
        subject: &str,
        issuer: &str,
    ) -> (PathBuf, PathBuf) {
        use rcgen::{
            CertificateParams, CustomExtension, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose,
            SanType,
        };
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::Rfc822Name(subject.try_into().unwrap())];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        let mut utf8 = vec![0x0c, u8::try_from(issuer.len()).expect("a short issuer")];
        utf8.extend_from_slice(issuer.as_bytes());
        params.custom_extensions = vec![CustomExtension::from_oid_content(FULCIO_ISSUER, utf8)];
        let certificate = params.signed_by(&key, &self.ca).unwrap();
        let cert_file = work.join(format!("{name}.crt"));
        std::fs::write(&cert_file, certificate.pem()).unwrap();
        let pem = work.join(format!("{name}-private.pem"));
        std::fs::write(&pem, key.serialize_pem()).unwrap();
        let mut c = cosign(work);
        c.args(["import-key-pair", "--output-key-prefix", name, "--key"])
            .arg(&pem);
        run("cosign import-key-pair", c);
        (work.join(format!("{name}.key")), cert_file)
    }

    /// `cosign sign --key KEY --certificate CERT --certificate-chain CA
    /// IMAGE` (`image` by digest), trusting `registry_ca` for the registry.
    pub fn sign(
        &self,
        work: &Path,
        (key, cert): &(PathBuf, PathBuf),
        image: &str,
        registry_ca: &Path,
    ) {
        let mut c = cosign(work);
        c.args(["sign", "--tlog-upload=false", "-y", "--key"])
            .arg(key)
            .arg("--certificate")
            .arg(cert)
            .arg("--certificate-chain")
            .arg(&self.ca_file)
            .arg("--registry-cacert")
            .arg(registry_ca)
            .arg(image);
        run(&format!("cosign sign --certificate {image}"), c);
    }
}
