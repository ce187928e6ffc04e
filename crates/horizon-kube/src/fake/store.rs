//! The fake API server's objects: a resourceVersion on every change, a bounded change log
//! that watches read (and that compaction shortens: a watch from before it gets 410 Gone),
//! label selectors, and ownerReference garbage collection.

use std::collections::{BTreeMap, HashSet, VecDeque};

use serde_json::{Value, json};

/// Changes kept for watches; older resourceVersions are compacted away.
pub(crate) const LOG_CAP: usize = 4096;

/// `(resource, namespace, name)`: `("pods", "horizon", "mtl-gs-0-ab12cd")`.
pub(crate) type Key = (String, String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub(crate) fn wire(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) key: Key,
    pub(crate) kind: ChangeKind,
    pub(crate) object: Value,
}

/// Why a request was refused: an HTTP code, a Kubernetes reason, a message.
#[derive(Debug, PartialEq)]
pub(crate) struct Refusal {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Refusal {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Refusal { code, reason, message: message.into() }
    }

    /// The `Status` object the API server answers with.
    pub(crate) fn status(&self) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message, "reason": self.reason, "code": self.code})
    }
}

/// Every object, and the changes watches have not been compacted away from.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    log: VecDeque<Change>,
    /// Every change after this resourceVersion is in `log`.
    compacted: u64,
    next_uid: u64,
    /// Pods whose container the kubelet runs: deleting one waits for the kubelet.
    pub(crate) running: HashSet<String>,
}

impl Objects {
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Objects of `resource` in `namespace` matching `selector`, in name order.
    pub(crate) fn list(&self, resource: &str, namespace: &str, selector: &Selector) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((r, ns, _), o)| r == resource && ns == namespace && selector.matches(o))
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Every pod (the kubelet's view).
    pub(crate) fn pods(&self) -> Vec<(Key, Value)> {
        self.objects
            .iter()
            .filter(|((r, ..), _)| r == "pods")
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect()
    }

    /// The changes after `rv`, or `None` if some were compacted away (410 Gone).
    pub(crate) fn since(&self, rv: u64) -> Option<impl Iterator<Item = &Change>> {
        (rv >= self.compacted).then(|| self.log.iter().filter(move |c| c.rv > rv))
    }

    /// Forgets every change so far, and moves the resourceVersion on (as etcd's compaction
    /// revision does): a watch from any resourceVersion seen so far gets 410 Gone.
    pub(crate) fn compact(&mut self) {
        self.log.clear();
        self.rv += 1;
        self.compacted = self.rv;
    }

    fn record(&mut self, key: Key, kind: ChangeKind, object: Value) {
        self.log.push_back(Change { rv: self.rv, key, kind, object });
        while self.log.len() > LOG_CAP {
            if let Some(old) = self.log.pop_front() {
                self.compacted = old.rv;
            }
        }
    }

    fn bump(&mut self, object: &mut Value) {
        self.rv += 1;
        object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
    }

    /// Creates `object` (its name or generateName set), filling in uid, resourceVersion,
    /// creationTimestamp and (pods) a Pending status.
    pub(crate) fn create(
        &mut self,
        resource: &str,
        namespace: &str,
        mut object: Value,
        now: &str,
    ) -> Result<Value, Refusal> {
        if !object.is_object() || !object["metadata"].is_object() {
            return Err(Refusal::new(400, "BadRequest", "the body is not an object with metadata"));
        }
        let meta = &mut object["metadata"];
        if let Some(ns) = meta["namespace"].as_str().filter(|ns| *ns != namespace) {
            return Err(Refusal::new(
                400,
                "BadRequest",
                format!(
                    "the namespace of the object ({ns}) does not match the namespace of the request ({namespace})"
                ),
            ));
        }
        let name = match (meta["name"].as_str(), meta["generateName"].as_str()) {
            (Some(name), _) => name.to_owned(),
            (None, Some(prefix)) => format!("{prefix}{:05x}", fastrand::u32(..0x10_0000)),
            (None, None) => {
                return Err(Refusal::new(422, "Invalid", "metadata.name: Required value"));
            }
        };
        if !is_dns_label(&name) {
            return Err(Refusal::new(
                422,
                "Invalid",
                format!("metadata.name {name:?}: not a DNS-1123 label"),
            ));
        }
        if resource == "pods" {
            validate_pod(&object)?;
        }
        let key = (resource.to_owned(), namespace.to_owned(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(Refusal::new(
                409,
                "AlreadyExists",
                format!("{resource} \"{name}\" already exists"),
            ));
        }
        self.next_uid += 1;
        let meta = &mut object["metadata"];
        meta["name"] = json!(name);
        meta["namespace"] = json!(namespace);
        meta["uid"] = json!(format!("fake-{:08x}-{:04x}", self.next_uid, fastrand::u16(..)));
        meta["creationTimestamp"] = json!(now);
        if resource == "pods" {
            object["status"] = json!({"phase": "Pending"});
        }
        self.bump(&mut object);
        self.objects.insert(key.clone(), object.clone());
        self.record(key, ChangeKind::Added, object.clone());
        Ok(object)
    }

    /// Replaces an object's content through `change` (a new resourceVersion, a MODIFIED event).
    pub(crate) fn modify(&mut self, key: &Key, change: impl FnOnce(&mut Value)) -> Option<Value> {
        let mut object = self.objects.get(key)?.clone();
        change(&mut object);
        self.bump(&mut object);
        self.objects.insert(key.clone(), object.clone());
        self.record(key.clone(), ChangeKind::Modified, object.clone());
        Some(object)
    }

    /// Deletes an object. A pod whose container runs is only marked (deletionTimestamp, the
    /// grace period): the kubelet stops it, then calls [`Objects::remove`]. Dependents (by
    /// ownerReference) are deleted once their owner is gone.
    pub(crate) fn delete(
        &mut self,
        key: &Key,
        grace_s: Option<i64>,
        now: &str,
    ) -> Result<Value, Refusal> {
        let Some(object) = self.objects.get(key) else {
            return Err(Refusal::new(
                404,
                "NotFound",
                format!("{} \"{}\" not found", key.0, key.2),
            ));
        };
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        if key.0 == "pods" && self.running.contains(&uid) {
            if !object["metadata"]["deletionTimestamp"].is_null() {
                return Ok(object.clone());
            }
            let grace = grace_s
                .or(object["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30)
                .max(0);
            return self
                .modify(key, |o| {
                    o["metadata"]["deletionTimestamp"] = json!(now);
                    o["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                })
                .ok_or_else(|| Refusal::new(404, "NotFound", "gone"));
        }
        Ok(self.remove(key, now).unwrap_or_default())
    }

    /// The eviction subresource (`kubectl drain`, a cluster autoscaler): the pod is deleted
    /// with its grace as by `delete`, unless that would take a PodDisruptionBudget of its
    /// namespace that selects it below what it allows (429 `TooManyRequests`, nothing
    /// changes). Healthy pods are those Ready and not being deleted; a pod already being
    /// deleted is evicted again without a check (nothing more is disrupted). Not modelled:
    /// `unhealthyPodEvictionPolicy` (an unhealthy pod is always evicted), `matchExpressions`
    /// (refused, 422) and the budget's status (the check counts the pods each time, under the
    /// store's lock, so two evictions cannot both pass a budget of one).
    pub(crate) fn evict(
        &mut self,
        key: &Key,
        grace_s: Option<i64>,
        now: &str,
    ) -> Result<Value, Refusal> {
        let Some(pod) = self.objects.get(key) else {
            return Err(Refusal::new(404, "NotFound", format!("pods \"{}\" not found", key.2)));
        };
        if pod["metadata"]["deletionTimestamp"].is_null() && healthy(pod) {
            for ((resource, ns, name), budget) in &self.objects {
                if resource != "poddisruptionbudgets" || *ns != key.1 {
                    continue;
                }
                let selector = budget_selector(budget, name)?;
                if !selector.matches(pod) {
                    continue;
                }
                let pods = self.list("pods", ns, &selector);
                let well = pods.iter().filter(|p| healthy(p)).count();
                let allowed = disruptions_allowed(budget, name, pods.len(), well)?;
                if allowed < 1 {
                    return Err(Refusal::new(
                        429,
                        "TooManyRequests",
                        format!(
                            "Cannot evict pod as it would violate the pod's disruption budget (poddisruptionbudgets \"{name}\": {well} of {} pods healthy).",
                            pods.len()
                        ),
                    ));
                }
            }
        }
        self.delete(key, grace_s, now)
    }

    /// Removes an object at once (a DELETED event), then collects its dependents.
    pub(crate) fn remove(&mut self, key: &Key, now: &str) -> Option<Value> {
        let mut object = self.objects.remove(key)?;
        self.bump(&mut object);
        self.record(key.clone(), ChangeKind::Deleted, object.clone());
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let dependents: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, o)| {
                o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid.as_str()))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for dependent in dependents {
            let _ = self.delete(&dependent, None, now);
        }
        Some(object)
    }
}

/// Ready, and not being deleted: what a disruption budget counts as available.
fn healthy(pod: &Value) -> bool {
    let ready = pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    ready && pod["metadata"]["deletionTimestamp"].is_null()
}

/// A budget's `spec.selector.matchLabels` as a selector (the only form modelled).
fn budget_selector(budget: &Value, name: &str) -> Result<Selector, Refusal> {
    let selector = &budget["spec"]["selector"];
    if selector.get("matchExpressions").is_some() {
        return Err(Refusal::new(
            422,
            "Invalid",
            format!(
                "poddisruptionbudgets \"{name}\": matchExpressions are not modelled by the fake API server"
            ),
        ));
    }
    let labels = selector["matchLabels"].as_object().into_iter().flatten();
    let pairs =
        labels.map(|(k, v)| Requirement::Equals(k.clone(), v.as_str().unwrap_or("").into()));
    Ok(Selector(pairs.collect()))
}

/// How many more of a budget's `pods` (`well` of them healthy) may go now: `maxUnavailable`
/// less those already unavailable, or the healthy beyond `minAvailable`. Either may be a count
/// or a percentage of the pods (rounded up, as the disruption controller does).
fn disruptions_allowed(
    budget: &Value,
    name: &str,
    pods: usize,
    well: usize,
) -> Result<i64, Refusal> {
    let spec = &budget["spec"];
    let bad = |field: &str| {
        Refusal::new(
            422,
            "Invalid",
            format!("poddisruptionbudgets \"{name}\": spec.{field}: an integer or a percentage"),
        )
    };
    let amount = |field: &str| -> Result<Option<i64>, Refusal> {
        match &spec[field] {
            Value::Null => Ok(None),
            Value::Number(n) => n.as_i64().map(Some).ok_or_else(|| bad(field)),
            Value::String(s) => {
                let percent: i64 =
                    s.strip_suffix('%').and_then(|p| p.parse().ok()).ok_or_else(|| bad(field))?;
                Ok(Some((percent * pods as i64 + 99) / 100))
            }
            _ => Err(bad(field)),
        }
    };
    let (pods, well) = (pods as i64, well as i64);
    match (amount("maxUnavailable")?, amount("minAvailable")?) {
        (Some(max), None) => Ok(max - (pods - well)),
        (None, Some(min)) => Ok(well - min),
        (None, None) => Err(Refusal::new(
            422,
            "Invalid",
            format!(
                "poddisruptionbudgets \"{name}\": set minAvailable or maxUnavailable (the fake API server models no default)"
            ),
        )),
        (Some(_), Some(_)) => Err(Refusal::new(
            422,
            "Invalid",
            format!(
                "poddisruptionbudgets \"{name}\": minAvailable and maxUnavailable cannot be both set"
            ),
        )),
    }
}

fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// What the real API server's validation would refuse first in a pod of ours.
fn validate_pod(pod: &Value) -> Result<(), Refusal> {
    let containers = pod["spec"]["containers"].as_array().filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        return Err(Refusal::new(422, "Invalid", "spec.containers: Required value"));
    };
    for (i, c) in containers.iter().enumerate() {
        if c["name"].as_str().is_none_or(|n| !is_dns_label(n)) {
            return Err(Refusal::new(
                422,
                "Invalid",
                format!("spec.containers[{i}].name: Required value"),
            ));
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            return Err(Refusal::new(
                422,
                "Invalid",
                format!("spec.containers[{i}].image: Required value"),
            ));
        }
    }
    Ok(())
}

/// An equality-based label selector: `a=b`, `a==b`, `a!=b`, `a`, `!a`, comma-separated.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Selector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

impl Selector {
    pub(crate) fn parse(text: &str) -> Result<Selector, Refusal> {
        let bad = |part: &str| {
            Refusal::new(
                400,
                "BadRequest",
                format!(
                    "unable to parse requirement {part:?} (set-based selectors are not modelled)"
                ),
            )
        };
        let mut requirements = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let requirement = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::Absent(k.trim().into())
            } else if part.contains(' ') || part.contains('(') {
                return Err(bad(part));
            } else {
                Requirement::Exists(part.into())
            };
            requirements.push(requirement);
        }
        Ok(Selector(requirements))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels[k].as_str() == Some(v),
            Requirement::NotEquals(k, v) => labels[k].as_str() != Some(v),
            Requirement::Exists(k) => labels.get(k).is_some(),
            Requirement::Absent(k) => labels.get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels},
               "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn every_change_has_a_new_resource_version_and_compaction_means_gone() {
        let mut o = Objects::default();
        let a = o.create("pods", "ns", pod("a", json!({})), "t").unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        assert_eq!(a["status"]["phase"], "Pending");
        let key = ("pods".to_owned(), "ns".to_owned(), "a".to_owned());
        o.modify(&key, |p| p["status"]["phase"] = json!("Running")).unwrap();
        assert_eq!(o.since(0).unwrap().map(|c| c.rv).collect::<Vec<_>>(), [1, 2]);
        o.compact();
        assert!(o.since(2).is_none(), "410 Gone from before the compaction");
        assert_eq!(o.since(o.rv()).unwrap().count(), 0);
        let refused = o.create("pods", "ns", pod("a", json!({})), "t").unwrap_err();
        assert_eq!((refused.code, refused.reason), (409, "AlreadyExists"));
        let refused = o.create("pods", "ns", json!({"metadata": {"name": "b"}, "spec": {}}), "t");
        assert_eq!(refused.unwrap_err().code, 422);
    }

    #[test]
    fn deleting_an_owner_deletes_what_it_owns_and_nothing_else() {
        let mut o = Objects::default();
        let owner = o.create("pods", "ns", pod("agent", json!({})), "t").unwrap();
        let uid = owner["metadata"]["uid"].clone();
        let mut owned = pod("gs", json!({}));
        owned["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "agent", "uid": uid}]);
        o.create("pods", "ns", owned, "t").unwrap();
        o.create("pods", "ns", pod("other", json!({})), "t").unwrap();
        o.delete(&("pods".into(), "ns".into(), "agent".into()), None, "t").unwrap();
        let left: Vec<_> = o.pods().into_iter().map(|(k, _)| k.2).collect();
        assert_eq!(left, ["other"]);
    }

    fn running(o: &mut Objects, name: &str, labels: Value) -> Key {
        let key: Key = ("pods".into(), "ns".into(), name.into());
        let created = o.create("pods", "ns", pod(name, labels), "t").unwrap();
        o.running.insert(created["metadata"]["uid"].as_str().unwrap().to_owned());
        o.modify(&key, |p| {
            p["status"] =
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        });
        key
    }

    fn budget(o: &mut Objects, spec: Value) {
        let spec = json!({"selector": {"matchLabels": {"app": "gs"}}})
            .as_object()
            .unwrap()
            .clone()
            .into_iter()
            .chain(spec.as_object().unwrap().clone())
            .collect::<serde_json::Map<_, _>>();
        o.create(
            "poddisruptionbudgets",
            "ns",
            json!({"metadata": {"name": "gs"}, "spec": spec}),
            "t",
        )
        .unwrap();
    }

    #[test]
    fn an_eviction_deletes_gracefully_within_the_budget_and_is_refused_beyond_it() {
        let mut o = Objects::default();
        let (a, b) = (
            running(&mut o, "a", json!({"app": "gs"})),
            running(&mut o, "b", json!({"app": "gs"})),
        );
        let other = running(&mut o, "other", json!({"app": "web"}));
        budget(&mut o, json!({"maxUnavailable": 1}));
        let evicted = o.evict(&a, Some(20), "t").unwrap();
        assert_eq!(evicted["metadata"]["deletionGracePeriodSeconds"], 20, "graceful: {evicted}");
        let refused = o.evict(&b, None, "t").unwrap_err();
        assert_eq!((refused.code, refused.reason), (429, "TooManyRequests"), "{}", refused.message);
        assert!(o.get(&b).unwrap()["metadata"]["deletionTimestamp"].is_null(), "nothing changed");
        o.evict(&a, None, "t").expect("a pod already going is evicted again");
        o.evict(&other, None, "t").expect("a pod no budget selects");
        let gone = o.evict(&("pods".into(), "ns".into(), "nope".into()), None, "t").unwrap_err();
        assert_eq!(gone.code, 404);
    }

    #[test]
    fn a_budgets_counts_and_percentages_are_read_as_the_disruption_controller_does() {
        for (spec, pods, evictable) in [
            (json!({"minAvailable": 2}), 3, 1),
            (json!({"minAvailable": "50%"}), 4, 2),
            (json!({"maxUnavailable": "25%"}), 4, 1),
            (json!({"maxUnavailable": 0}), 2, 0),
        ] {
            let mut o = Objects::default();
            let keys: Vec<Key> = (0..pods)
                .map(|i| running(&mut o, &format!("p{i}"), json!({"app": "gs"})))
                .collect();
            budget(&mut o, spec.clone());
            let evicted = keys.iter().take_while(|k| o.evict(k, None, "t").is_ok()).count();
            assert_eq!(evicted, evictable, "{spec} over {pods} pods");
        }
        let mut o = Objects::default();
        let key = running(&mut o, "p", json!({"app": "gs"}));
        budget(&mut o, json!({"maxUnavailable": "one"}));
        assert_eq!(o.evict(&key, None, "t").unwrap_err().code, 422);
    }

    #[test]
    fn selectors_match_equality_inequality_and_existence() {
        let o = pod("a", json!({"app": "x", "site": "MTL"}));
        for (text, want) in [
            ("app=x", true),
            ("app==x,site=MTL", true),
            ("app=y", false),
            ("site!=HKG", true),
            ("app", true),
            ("!app", false),
            ("", true),
        ] {
            assert_eq!(Selector::parse(text).unwrap().matches(&o), want, "{text}");
        }
        assert_eq!(Selector::parse("app in (x)").unwrap_err().code, 400);
    }
}
