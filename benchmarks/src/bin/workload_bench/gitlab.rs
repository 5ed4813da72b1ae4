//! The application the benchmark applies: GitLab-sized, 43 templates of
//! several containers, env, probes and resources, and ConfigMaps of a few
//! KiB.

use serde_json::{Value, json};

use crate::NS;

/// Templates per application.
pub const TEMPLATES: usize = 14 + 1 + 3 + 9 + 16;

/// Text of about `bytes` bytes that reads like a configuration file.
fn config_text(seed: &str, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 80);
    let mut i = 0;
    while out.len() < bytes {
        out.push_str(&format!(
            "{seed}_setting_{i:03}: \"value-{i}-of-{seed}-with-some-length\"  # tuned for production\n"
        ));
        i += 1;
    }
    out
}

fn env(component: &str, n: usize) -> Value {
    let mut vars: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("{}_OPTION_{i}", component.to_uppercase().replace('-', "_")), "value": format!("{component}-value-{i}")}))
        .collect();
    vars.push(json!({"name": "GITLAB_HOST", "value": "https://gitlab.example.com"}));
    vars.push(
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
    );
    Value::Array(vars)
}

fn container(component: &str, image: &str, port: u16, env_vars: usize) -> Value {
    json!({
        "name": component,
        "image": format!("registry.gitlab.com/gitlab-org/build/cng/{image}:v17.0.0"),
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": format!("p{port}"), "containerPort": port, "protocol": "TCP"}],
        "env": env(component, env_vars),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "livenessProbe": {"httpGet": {"path": "/-/liveness", "port": port}, "initialDelaySeconds": 20, "periodSeconds": 60, "timeoutSeconds": 30},
        "readinessProbe": {"httpGet": {"path": "/-/readiness", "port": port}, "periodSeconds": 10, "timeoutSeconds": 2},
        "volumeMounts": [
            {"name": "config", "mountPath": format!("/etc/gitlab/{component}"), "readOnly": true},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
    })
}

/// A pod template with a main container, a sidecar and an init container.
fn pod(component: &str, port: u16) -> Value {
    let mut init = container(
        &format!("{component}-certificates"),
        "certificates",
        8000,
        3,
    );
    // Init containers have no probes and serve nothing.
    for field in ["livenessProbe", "readinessProbe", "ports"] {
        if let Some(o) = init.as_object_mut() {
            o.remove(field);
        }
    }
    json!({
        "metadata": {"labels": {"app": component, "release": "gitlab"}, "annotations": {"checksum/config": format!("{:064x}", component.len())}},
        "spec": {
            "serviceAccountName": "default",
            "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
            "initContainers": [init],
            "containers": [
                container(component, &format!("gitlab-{component}-ee"), port, 16),
                container(&format!("{component}-exporter"), "gitlab-exporter", 9168, 6),
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": component}},
                {"name": "tmp", "emptyDir": {"medium": "Memory"}},
            ],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": component}}}}]}},
        },
    })
}

const DEPLOYMENTS: [&str; 14] = [
    "webservice",
    "sidekiq",
    "gitlab-shell",
    "gitlab-exporter",
    "registry",
    "kas",
    "toolbox",
    "gitlab-pages",
    "spamcheck",
    "nginx-controller",
    "nginx-backend",
    "certmanager",
    "certmanager-cainjector",
    "prometheus",
];
const JOBS: [&str; 3] = ["migrations", "shared-secrets", "minio-buckets"];
const SERVICES: [&str; 9] = [
    "webservice",
    "gitlab-shell",
    "registry",
    "kas",
    "gitaly",
    "gitlab-exporter",
    "gitlab-pages",
    "nginx-controller",
    "prometheus",
];
const CONFIGMAPS: [&str; 16] = [
    "webservice",
    "sidekiq",
    "gitlab-shell",
    "gitlab-exporter",
    "registry",
    "kas",
    "toolbox",
    "gitlab-pages",
    "spamcheck",
    "nginx-controller",
    "nginx-backend",
    "certmanager",
    "certmanager-cainjector",
    "prometheus",
    "gitaly",
    "migrations",
];

fn template(app: &str, kind: &str, name: &str, body: Value) -> Value {
    let (api_version, spec_key) = match kind {
        "Deployment" | "StatefulSet" => ("apps/v1", "spec"),
        "Job" => ("batch/v1", "spec"),
        "ConfigMap" => ("v1", "data"),
        _ => ("v1", "spec"),
    };
    json!({
        "metadata": {"name": format!("{app}-{}-{name}", kind.to_lowercase()), "labels": {"app": app}},
        "spec": {"template": {
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "labels": {"app": name, "release": "gitlab"}},
            spec_key: body,
        }},
    })
}

/// A GitLab-sized application's 43 resource templates, for the remote
/// namespace `remote_ns`.
fn gitlab(app: &str, remote_ns: &str) -> Vec<Value> {
    let mut t = Vec::with_capacity(TEMPLATES);
    for (i, d) in DEPLOYMENTS.iter().enumerate() {
        t.push(template(
            app,
            "Deployment",
            d,
            json!({
                "replicas": 1,
                "selector": {"matchLabels": {"app": d, "release": "gitlab"}},
                "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": pod(d, 8080 + i as u16),
            }),
        ));
    }
    t.push(template(app, "StatefulSet", "gitaly", json!({
        "replicas": 1,
        "serviceName": "gitaly",
        "selector": {"matchLabels": {"app": "gitaly", "release": "gitlab"}},
        "template": pod("gitaly", 8075),
        "volumeClaimTemplates": [{"metadata": {"name": "repo-data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}}}],
    })));
    for j in JOBS {
        let mut p = pod(j, 8000);
        p["spec"]["restartPolicy"] = json!("OnFailure");
        t.push(template(
            app,
            "Job",
            j,
            json!({"backoffLimit": 6, "activeDeadlineSeconds": 3600, "template": p}),
        ));
    }
    for (i, s) in SERVICES.iter().enumerate() {
        t.push(template(app, "Service", s, json!({
            "type": "ClusterIP",
            "selector": {"app": s, "release": "gitlab"},
            "ports": [
                {"name": "http", "port": 8080 + i as u16, "targetPort": 8080 + i as u16, "protocol": "TCP"},
                {"name": "metrics", "port": 9168, "targetPort": 9168, "protocol": "TCP"},
            ],
        })));
    }
    for (i, c) in CONFIGMAPS.iter().enumerate() {
        t.push(template(
            app,
            "ConfigMap",
            c,
            json!({
                "config.yml": config_text(c, 2048 + 256 * (i % 4)),
                "configure": config_text(&format!("{c}_script"), 1024),
                "installation_type": "gitlab-helm-chart",
            }),
        ));
    }
    for r in &mut t {
        r["spec"]["template"]["metadata"]["namespace"] = json!(remote_ns);
    }
    t
}

pub fn application(name: &str, cluster: &str, remote_ns: &str) -> Value {
    json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplication",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "clusterSelector": {"matchLabels": {"bench-cluster": cluster}},
            "resourceTemplates": gitlab(name, remote_ns),
        },
    })
}
