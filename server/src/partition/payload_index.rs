//! Payload indexes of a partition: for each indexed key, the slots holding each value, so a
//! filter finds its candidates without reading every payload.
//!
//! Posting lists only grow. A slot is never reused: an overwritten or deleted point leaves a
//! dead slot behind until the vacuum rebuilds the table (and these lists with it), so a list
//! holds dead slots that the reader skips, and nothing is ever removed from one. The lists are
//! candidates, not answers: every candidate is still checked against the whole filter, so an
//! index only has to hold *at least* the slots that can match a condition it serves. It
//! declines (`None`) any condition it cannot bound that way, such as a string match on an
//! integer index (a point may hold a string there that the index never saw).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound::{self, Excluded, Included, Unbounded};

use cairn_api::{
    Condition, DatetimeRange, FieldCondition, Filter, Payload, PayloadSchemaType, PointId,
    RangeCondition,
};
use cairn_index::Slot;
use serde_json::Value;

use crate::request::filter::{datetime, lookup, words};
use crate::request::geo::{self, CoverBox};

/// Indexed keys and what each is indexed as; stored in the partition's meta as JSON.
pub type PayloadSchema = BTreeMap<String, PayloadSchemaType>;

/// Meta key the schema is stored under.
pub const SCHEMA_KEY: &str = "payload_schema";

/// A float with a total order, for range lookups.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Number(f64);

impl Eq for Number {}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Values to slots, by index type.
#[derive(Debug)]
enum Postings {
    /// Keyword, uuid and bool: a canonical string per value.
    Exact(HashMap<String, Vec<Slot>>),
    /// Integer and float.
    Numeric(BTreeMap<Number, Vec<Slot>>),
    /// Text: each word once per slot.
    Words(HashMap<String, Vec<Slot>>),
    /// Datetime: microseconds since the epoch.
    Instants(BTreeMap<i64, Vec<Slot>>),
    /// Geo: cells of the longitude/latitude grid, keyed `(latitude row, longitude column)`.
    Cells(BTreeMap<(i32, i32), Vec<Slot>>),
}

/// Degrees per side of a geo index's cell: about 1.1 km of latitude. A query's candidates are
/// the points of the cells its cover boxes touch.
const CELL_DEGREES: f64 = 0.01;

/// A geo cover box spanning more rows than this is looked up by walking every occupied cell
/// rather than each row's range of columns.
const MAX_ROWS_WALKED: i64 = 256;

/// The row or column of a coordinate. Monotone, so a coordinate within a box has its cell
/// within the box's cells.
fn cell(degrees: f64) -> i32 {
    (degrees / CELL_DEGREES).floor() as i32
}

/// One indexed key.
#[derive(Debug)]
struct FieldIndex {
    kind: PayloadSchemaType,
    postings: Postings,
}

/// The canonical form of a UUID string (lower case, hyphenated), if it is one.
fn uuid_key(s: &str) -> Option<String> {
    uuid::Uuid::parse_str(s)
        .ok()
        .map(|u| u.hyphenated().to_string())
}

impl FieldIndex {
    fn new(kind: PayloadSchemaType) -> Self {
        let postings = match kind {
            PayloadSchemaType::Integer | PayloadSchemaType::Float => {
                Postings::Numeric(BTreeMap::new())
            }
            PayloadSchemaType::Text => Postings::Words(HashMap::new()),
            PayloadSchemaType::Datetime => Postings::Instants(BTreeMap::new()),
            PayloadSchemaType::Geo => Postings::Cells(BTreeMap::new()),
            PayloadSchemaType::Keyword | PayloadSchemaType::Bool | PayloadSchemaType::Uuid => {
                Postings::Exact(HashMap::new())
            }
        };
        Self { kind, postings }
    }

    /// The exact-match key of a value this index holds, if it holds that kind of value.
    fn exact_key(kind: PayloadSchemaType, value: &Value) -> Option<String> {
        match (kind, value) {
            (PayloadSchemaType::Keyword, Value::String(s)) => Some(s.clone()),
            (PayloadSchemaType::Uuid, Value::String(s)) => uuid_key(s),
            (PayloadSchemaType::Bool, Value::Bool(b)) => Some(b.to_string()),
            _ => None,
        }
    }

    /// The number a numeric index holds for a value, if it is one. An integer index holds
    /// every number at its key, fractions too: the filter compares numbers as numbers (2.5
    /// passes `gte 2`, 3.0 equals 3), so a list that left them out would miss matches.
    fn number(value: &Value) -> Option<Number> {
        value.as_f64().map(Number)
    }

    fn add(&mut self, slot: Slot, values: &[&Value]) {
        let kind = self.kind;
        match &mut self.postings {
            Postings::Exact(map) => {
                for key in values.iter().filter_map(|v| Self::exact_key(kind, v)) {
                    push_once(map.entry(key).or_default(), slot);
                }
            }
            Postings::Numeric(map) => {
                for n in values.iter().filter_map(|v| Self::number(v)) {
                    push_once(map.entry(n).or_default(), slot);
                }
            }
            Postings::Words(map) => {
                for text in values.iter().filter_map(|v| v.as_str()) {
                    for word in words(text) {
                        push_once(map.entry(word).or_default(), slot);
                    }
                }
            }
            Postings::Instants(map) => {
                for t in values.iter().filter_map(|v| datetime(v)) {
                    push_once(map.entry(t.micros()).or_default(), slot);
                }
            }
            Postings::Cells(map) => {
                for p in values.iter().filter_map(|v| geo::point(v)) {
                    push_once(map.entry((cell(p.lat), cell(p.lon))).or_default(), slot);
                }
            }
        }
    }

    /// The posting lists that bound `c` (their slots are a superset of the live slots that
    /// pass it); `None` when this index cannot bound the condition.
    fn lists(&self, c: &FieldCondition) -> Option<Lists<'_>> {
        let kind = self.kind;
        if let Some(m) = &c.r#match {
            if let Some(text) = &m.text {
                let Postings::Words(map) = &self.postings else {
                    return None;
                };
                return words_lists(map, text);
            }
            if let Some(text) = &m.text_any {
                let Postings::Words(map) = &self.postings else {
                    return None;
                };
                return Some(Lists::Any(
                    words(text).filter_map(|w| map.get(&w)).collect(),
                ));
            }
            if let Some(prefix) = &m.prefix {
                // A keyword index holds the strings as they are; a uuid index does not.
                let (Postings::Exact(map), PayloadSchemaType::Keyword) = (&self.postings, kind)
                else {
                    return None;
                };
                return Some(Lists::Any(
                    map.iter()
                        .filter(|(value, _)| value.starts_with(prefix.as_str()))
                        .map(|(_, slots)| slots)
                        .collect(),
                ));
            }
            let wanted: Vec<&Value> = match (&m.value, &m.any) {
                (Some(v), None) => vec![v],
                (None, Some(any)) => any.iter().collect(),
                _ => return None,
            };
            return match &self.postings {
                Postings::Exact(map) => {
                    let keys = wanted
                        .iter()
                        .map(|v| Self::exact_key(kind, v))
                        .collect::<Option<Vec<_>>>()?;
                    Some(Lists::Any(keys.iter().filter_map(|k| map.get(k)).collect()))
                }
                Postings::Numeric(map) => {
                    let numbers = wanted
                        .iter()
                        .map(|v| Self::number(v))
                        .collect::<Option<Vec<_>>>()?;
                    Some(Lists::Any(
                        numbers.iter().filter_map(|n| map.get(n)).collect(),
                    ))
                }
                Postings::Words(_) | Postings::Instants(_) | Postings::Cells(_) => None,
            };
        }
        match (&c.range, &self.postings) {
            (Some(RangeCondition::Numbers(r)), Postings::Numeric(map)) => {
                let bounds = bounds([r.gt, r.gte, r.lt, r.lte].map(|b| b.map(Number)));
                Some(Lists::Any(in_bounds(map, bounds)))
            }
            (Some(RangeCondition::Datetimes(r)), Postings::Instants(map)) => {
                Some(Lists::Any(in_bounds(map, bounds(micros(r)))))
            }
            (None, Postings::Cells(map)) => {
                let boxes = geo::cover(
                    c.geo_bounding_box.as_ref(),
                    c.geo_radius.as_ref(),
                    c.geo_polygon.as_ref(),
                )?;
                Some(Lists::Any(
                    boxes.iter().flat_map(|b| in_cells(map, b)).collect(),
                ))
            }
            (Some(_) | None, _) => None,
        }
    }

    /// Whether the slots of [`Self::lists`] are exactly those passing `c` (dead ones aside):
    /// one test, `match.value`, `match.any`, `match.text` or `range`, that this index holds
    /// every value of. UUIDs are left to the full check, which compares their spellings.
    fn answers(&self, c: &FieldCondition) -> bool {
        let one_test = match (&c.r#match, &c.range) {
            (Some(m), None) => {
                let tests = [
                    m.value.is_some(),
                    m.any.is_some(),
                    m.text.is_some(),
                    m.text_any.is_some(),
                    m.prefix.is_some(),
                ];
                tests.iter().filter(|&&t| t).count() == 1
                    && m.except.is_none()
                    && m.phrase.is_none()
            }
            (None, Some(_)) => true,
            (Some(_), Some(_)) | (None, None) => false,
        };
        // Cells hold more than a geo condition's points: the full check decides.
        let geo = [
            c.geo_bounding_box.is_some(),
            c.geo_radius.is_some(),
            c.geo_polygon.is_some(),
        ];
        one_test
            && c.values_count.is_none()
            && !geo.contains(&true)
            && c.is_empty.is_none()
            && c.is_null.is_none()
            && self.kind != PayloadSchemaType::Uuid
            && self.lists(c).is_some()
    }

    /// Slots with at least one indexed value that are still live.
    fn live_points(&self, is_live: impl Fn(Slot) -> bool) -> u64 {
        let lists: Vec<&Vec<Slot>> = match &self.postings {
            Postings::Exact(map) | Postings::Words(map) => map.values().collect(),
            Postings::Numeric(map) => map.values().collect(),
            Postings::Instants(map) => map.values().collect(),
            Postings::Cells(map) => map.values().collect(),
        };
        union(lists.into_iter())
            .into_iter()
            .filter(|&s| is_live(s))
            .count() as u64
    }
}

/// The lists of a `match.text` query's words, all of which must be present; nothing when one
/// of them is in no text, `None` for a query of no words (it matches every text).
fn words_lists<'a>(map: &'a HashMap<String, Vec<Slot>>, text: &str) -> Option<Lists<'a>> {
    let mut lists: Vec<&Vec<Slot>> = Vec::new();
    for word in words(text) {
        match map.get(&word) {
            Some(list) => lists.push(list),
            None => return Some(Lists::Any(Vec::new())),
        }
    }
    (!lists.is_empty()).then_some(Lists::All(lists))
}

/// Posting lists that bound a condition: the slots in any of them, or in all of them.
enum Lists<'a> {
    Any(Vec<&'a Vec<Slot>>),
    All(Vec<&'a Vec<Slot>>),
}

impl Lists<'_> {
    /// At least as many as [`Self::slots`] holds, without building it.
    fn bound(&self) -> usize {
        match self {
            Lists::Any(lists) => lists.iter().map(|l| l.len()).sum(),
            Lists::All(lists) => lists.iter().map(|l| l.len()).min().unwrap_or(0),
        }
    }

    /// The slots, sorted and distinct.
    fn slots(self) -> Vec<Slot> {
        match self {
            Lists::Any(lists) => union(lists.into_iter()),
            Lists::All(mut lists) => {
                lists.sort_by_key(|l| l.len());
                let Some((first, rest)) = lists.split_first() else {
                    return Vec::new();
                };
                rest.iter().fold(sorted((*first).clone()), |acc, l| {
                    intersect(&acc, &sorted((*l).clone()))
                })
            }
        }
    }
}

/// Appends `slot` unless it is the list's last (one value twice in one payload).
fn push_once(list: &mut Vec<Slot>, slot: Slot) {
    if list.last() != Some(&slot) {
        list.push(slot);
    }
}

/// The bounds `[gt, gte, lt, lte]` as a range, the tighter of each pair (`gt` and `gte` both
/// given keep the larger); `None` when no value lies within them.
fn bounds<T: Ord + Copy>([gt, gte, lt, lte]: [Option<T>; 4]) -> Option<(Bound<T>, Bound<T>)> {
    let low = match (gt, gte) {
        (Some(gt), Some(gte)) if gte > gt => Included(gte),
        (Some(gt), _) => Excluded(gt),
        (None, Some(gte)) => Included(gte),
        (None, None) => Unbounded,
    };
    let high = match (lt, lte) {
        (Some(lt), Some(lte)) if lte < lt => Included(lte),
        (Some(lt), _) => Excluded(lt),
        (None, Some(lte)) => Included(lte),
        (None, None) => Unbounded,
    };
    // BTreeMap::range panics on an empty range.
    let empty = match (&low, &high) {
        (Included(a), Included(b)) => a > b,
        (Included(a) | Excluded(a), Included(b) | Excluded(b)) => a >= b,
        _ => false,
    };
    (!empty).then_some((low, high))
}

/// A datetime range's bounds in microseconds.
fn micros(r: &DatetimeRange) -> [Option<i64>; 4] {
    [r.gt, r.gte, r.lt, r.lte].map(|b| b.map(|t| t.micros()))
}

/// Visits each (key, slot) of `map` in key order (reversed when `descending`) from `start`
/// (inclusive) on, until `visit` breaks.
fn walk<K: Ord + Copy>(
    map: &BTreeMap<K, Vec<Slot>>,
    descending: bool,
    start: Option<K>,
    mut visit: impl FnMut(K, Slot) -> std::ops::ControlFlow<()>,
) {
    let mut range = match (start, descending) {
        (None, _) => map.range(..),
        (Some(v), false) => map.range(v..),
        (Some(v), true) => map.range(..=v),
    };
    let mut each = |(value, slots): (&K, &Vec<Slot>)| {
        slots
            .iter()
            .try_for_each(|&slot| visit(*value, slot))
            .is_continue()
    };
    if descending {
        range.rev().all(&mut each);
    } else {
        range.all(&mut each);
    }
}

/// The lists of the keys within `bounds`.
fn in_bounds<K: Ord>(
    map: &BTreeMap<K, Vec<Slot>>,
    bounds: Option<(Bound<K>, Bound<K>)>,
) -> Vec<&Vec<Slot>> {
    match bounds {
        Some(bounds) => map.range(bounds).map(|(_, slots)| slots).collect(),
        None => Vec::new(),
    }
}

/// The lists of the cells a cover box touches: each row's run of columns, or, for a box of
/// many rows, every occupied cell filtered by position (a country-sized box would otherwise
/// look up thousands of rows, mostly empty).
fn in_cells<'a>(map: &'a BTreeMap<(i32, i32), Vec<Slot>>, b: &CoverBox) -> Vec<&'a Vec<Slot>> {
    let (south, north) = (cell(b.south), cell(b.north));
    let (west, east) = (cell(b.west), cell(b.east));
    if south > north || west > east {
        return Vec::new();
    }
    if i64::from(north) - i64::from(south) >= MAX_ROWS_WALKED {
        return map
            .iter()
            .filter(|((row, column), _)| {
                (south..=north).contains(row) && (west..=east).contains(column)
            })
            .map(|(_, slots)| slots)
            .collect();
    }
    (south..=north)
        .flat_map(|row| map.range((row, west)..=(row, east)).map(|(_, slots)| slots))
        .collect()
}

fn sorted(mut slots: Vec<Slot>) -> Vec<Slot> {
    slots.sort_unstable();
    slots.dedup();
    slots
}

fn union<'a>(lists: impl Iterator<Item = &'a Vec<Slot>>) -> Vec<Slot> {
    sorted(lists.flatten().copied().collect())
}

/// Both sorted.
fn intersect(a: &[Slot], b: &[Slot]) -> Vec<Slot> {
    let (mut i, mut j, mut out) = (0, 0, Vec::with_capacity(a.len().min(b.len())));
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// Every payload index of a partition's table.
#[derive(Debug, Default)]
pub struct PayloadIndexes {
    fields: BTreeMap<String, FieldIndex>,
}

impl PayloadIndexes {
    /// Indexes a newly published slot's payload under every indexed key.
    pub fn add(&mut self, slot: Slot, payload: Option<&Payload>) {
        let Some(payload) = payload else {
            return;
        };
        for (key, index) in &mut self.fields {
            let values = lookup(Some(payload), key);
            if !values.is_empty() {
                index.add(slot, &values);
            }
        }
    }

    /// Makes the indexed keys those of `schema`: drops the others, and builds the missing ones
    /// (or those of another type) from the live `slots`.
    pub fn sync<'a>(
        &mut self,
        schema: &PayloadSchema,
        slots: impl Iterator<Item = (Slot, Option<&'a Payload>)> + Clone,
    ) {
        self.fields
            .retain(|key, index| schema.get(key) == Some(&index.kind));
        for (key, &kind) in schema {
            if self.fields.contains_key(key) {
                continue;
            }
            let mut index = FieldIndex::new(kind);
            for (slot, payload) in slots.clone() {
                let values = lookup(payload, key);
                if !values.is_empty() {
                    index.add(slot, &values);
                }
            }
            self.fields.insert(key.clone(), index);
        }
    }

    /// Visits the slots of `key`'s numeric or datetime index in the order of their values
    /// (largest first when `descending`), from `start_from` (inclusive) on, until `visit`
    /// breaks; a slot is visited once per value it holds. A datetime's value is its
    /// microseconds since the epoch. False when `key` has no such index.
    pub fn walk_ordered(
        &self,
        key: &str,
        descending: bool,
        start_from: Option<f64>,
        mut visit: impl FnMut(f64, Slot) -> std::ops::ControlFlow<()>,
    ) -> bool {
        match self.fields.get(key).map(|f| &f.postings) {
            Some(Postings::Numeric(map)) => {
                let start = start_from.map(Number);
                walk(map, descending, start, |n, slot| visit(n.0, slot));
            }
            Some(Postings::Instants(map)) => {
                // The first whole microsecond at or past the start in the walk's direction.
                let start = start_from.map(|v| match descending {
                    false => v.ceil() as i64,
                    true => v.floor() as i64,
                });
                walk(map, descending, start, |t, slot| visit(t as f64, slot));
            }
            Some(Postings::Exact(_) | Postings::Words(_) | Postings::Cells(_)) | None => {
                return false
            }
        }
        true
    }

    /// Each value of the index of `key` with the slots holding it that `accept` takes, for
    /// facet counts; `None` when `key` has no keyword, bool, uuid or integer index (a float's
    /// values are not categories, a text index holds words).
    pub fn facet(
        &self,
        key: &str,
        accept: impl Fn(Slot) -> bool,
    ) -> Option<Vec<(Value, Vec<Slot>)>> {
        let index = self.fields.get(key)?;
        let kept = |slots: &Vec<Slot>| slots.iter().copied().filter(|&s| accept(s)).collect();
        let values: Vec<(Value, Vec<Slot>)> = match (&index.postings, index.kind) {
            (Postings::Exact(map), PayloadSchemaType::Bool) => map
                .iter()
                .map(|(v, slots)| (Value::Bool(v == "true"), kept(slots)))
                .collect(),
            (Postings::Exact(map), PayloadSchemaType::Keyword | PayloadSchemaType::Uuid) => map
                .iter()
                .map(|(v, slots)| (Value::String(v.clone()), kept(slots)))
                .collect(),
            // Whole numbers only: an integer index also lists fractions (see `number`).
            (Postings::Numeric(map), PayloadSchemaType::Integer) => map
                .iter()
                .filter(|(n, _)| n.0.fract() == 0.0 && n.0.abs() < 9.0e15)
                .map(|(n, slots)| (Value::from(n.0 as i64), kept(slots)))
                .collect(),
            (
                Postings::Exact(_)
                | Postings::Numeric(_)
                | Postings::Words(_)
                | Postings::Instants(_)
                | Postings::Cells(_),
                PayloadSchemaType::Keyword
                | PayloadSchemaType::Integer
                | PayloadSchemaType::Float
                | PayloadSchemaType::Bool
                | PayloadSchemaType::Uuid
                | PayloadSchemaType::Datetime
                | PayloadSchemaType::Geo
                | PayloadSchemaType::Text,
            ) => return None,
        };
        Some(values.into_iter().filter(|(_, s)| !s.is_empty()).collect())
    }

    /// Keys whose `match.text` compares words (a text index) rather than substrings.
    pub fn is_text(&self, key: &str) -> bool {
        self.fields
            .get(key)
            .is_some_and(|f| f.kind == PayloadSchemaType::Text)
    }

    /// Live points with an indexed value, per key.
    pub fn points(&self, is_live: impl Fn(Slot) -> bool + Copy) -> BTreeMap<String, u64> {
        self.fields
            .iter()
            .map(|(key, index)| (key.clone(), index.live_points(is_live)))
            .collect()
    }

    /// Slots that may pass `filter` (sorted; a superset of the live slots that do), from the
    /// conditions an index or the id table can bound; `None` when none can. `slot_of` finds
    /// the slot of an id (`has_id`).
    pub fn candidates(
        &self,
        filter: &Filter,
        slot_of: &impl Fn(&PointId) -> Option<Slot>,
    ) -> Option<Vec<Slot>> {
        let mut best: Option<Vec<Slot>> = None;
        let mut narrow = |found: Vec<Slot>| {
            best = Some(match best.take() {
                None => found,
                Some(acc) => intersect(&acc, &found),
            });
        };
        for c in filter.must.iter().flatten() {
            if let Some(found) = self.condition_candidates(c, slot_of) {
                narrow(found);
            }
        }
        if let Some(should) = &filter.should {
            // One of them must hold: bounded only if each of them is.
            let lists = should
                .iter()
                .map(|c| self.condition_candidates(c, slot_of))
                .collect::<Option<Vec<_>>>();
            if let Some(lists) = lists {
                narrow(union(lists.iter()));
            }
        }
        best
    }

    /// At least as many slots as [`Self::candidates`] would list, counted from the lists'
    /// lengths without building them: a filter passing half the points would otherwise sort
    /// half the slots only to learn that it is not selective.
    pub fn bound(&self, filter: &Filter) -> Option<usize> {
        let mut best: Option<usize> = None;
        for c in filter.must.iter().flatten() {
            if let Some(n) = self.condition_bound(c) {
                best = Some(best.map_or(n, |b| b.min(n)));
            }
        }
        if let Some(should) = &filter.should {
            let bounds = should
                .iter()
                .map(|c| self.condition_bound(c))
                .collect::<Option<Vec<_>>>();
            if let Some(n) = bounds.map(|b| b.into_iter().sum::<usize>()) {
                best = Some(best.map_or(n, |b| b.min(n)));
            }
        }
        best
    }

    /// Whether [`Self::candidates`] are exactly the slots passing `filter`, dead slots aside:
    /// only `must` conditions (nested ones too), each answered exactly by an index or the id
    /// table. A search may then take the live candidates as matches without reading their
    /// payloads.
    pub fn answers(&self, filter: &Filter) -> bool {
        filter.should.is_none()
            && filter.must_not.is_none()
            && filter.min_should.is_none()
            && filter
                .must
                .as_ref()
                .is_some_and(|all| !all.is_empty() && all.iter().all(|c| self.condition_answers(c)))
    }

    fn condition_answers(&self, c: &Condition) -> bool {
        match c {
            Condition::Field(field) => self
                .fields
                .get(&field.key)
                .is_some_and(|index| index.answers(field)),
            Condition::HasId { .. } => true,
            Condition::Nested(inner) => self.answers(inner),
            Condition::IsEmpty { .. }
            | Condition::IsNull { .. }
            | Condition::HasVector { .. }
            | Condition::NestedArray { .. } => false,
        }
    }

    fn condition_candidates(
        &self,
        c: &Condition,
        slot_of: &impl Fn(&PointId) -> Option<Slot>,
    ) -> Option<Vec<Slot>> {
        match c {
            Condition::Field(field) => self.fields.get(&field.key)?.lists(field).map(Lists::slots),
            Condition::HasId { has_id } => {
                Some(sorted(has_id.iter().filter_map(slot_of).collect()))
            }
            Condition::Nested(inner) => self.candidates(inner, slot_of),
            Condition::IsEmpty { .. }
            | Condition::IsNull { .. }
            | Condition::HasVector { .. }
            | Condition::NestedArray { .. } => None,
        }
    }

    fn condition_bound(&self, c: &Condition) -> Option<usize> {
        match c {
            Condition::Field(field) => self.fields.get(&field.key)?.lists(field).map(|l| l.bound()),
            Condition::HasId { has_id } => Some(has_id.len()),
            Condition::Nested(inner) => self.bound(inner),
            Condition::IsEmpty { .. }
            | Condition::IsNull { .. }
            | Condition::HasVector { .. }
            | Condition::NestedArray { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::filter::{matches, no_text_keys, no_vectors, TextKeys};
    use serde_json::json;

    fn payload(json: Value) -> Option<Payload> {
        json.as_object().cloned()
    }

    fn filter(json: Value) -> Filter {
        serde_json::from_value(json).unwrap()
    }

    fn indexes(
        payloads: &[Option<Payload>],
        schema: &[(&str, PayloadSchemaType)],
    ) -> PayloadIndexes {
        let schema: PayloadSchema = schema.iter().map(|(k, t)| ((*k).to_owned(), *t)).collect();
        let mut indexes = PayloadIndexes::default();
        indexes.sync(&schema, slots(payloads));
        indexes
    }

    /// The slots whose payloads pass `f`, by the full check.
    fn matching(f: &Filter, entries: &[Option<Payload>], text: TextKeys) -> Vec<Slot> {
        (0..entries.len())
            .filter(|&i| {
                let id = PointId::Num(i as u64);
                matches(f, &id, entries[i].as_ref(), text, &no_vectors)
            })
            .map(|i| i as Slot)
            .collect()
    }

    fn slots(
        payloads: &[Option<Payload>],
    ) -> impl Iterator<Item = (Slot, Option<&Payload>)> + Clone {
        payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (i as Slot, p.as_ref()))
    }

    #[test]
    fn each_type_bounds_the_conditions_it_serves() {
        use PayloadSchemaType::{Bool, Float, Integer, Keyword, Text, Uuid};
        let entries = [
            payload(json!({"doc": "a", "n": 1, "x": 0.5, "ok": true, "body": "The quick fox"})),
            payload(json!({"doc": ["a", "b"], "n": 2, "x": 1.5, "ok": false, "body": "lazy dog"})),
            payload(json!({"doc": "c", "n": "2", "u": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"})),
            payload(json!({"meta": {"doc": "a"}, "body": "quick brown dog", "n": 2.5})),
        ];
        let ix = indexes(
            &entries,
            &[
                ("doc", Keyword),
                ("n", Integer),
                ("x", Float),
                ("ok", Bool),
                ("u", Uuid),
                ("body", Text),
                ("meta.doc", Keyword),
            ],
        );
        let none = |_: &PointId| None;
        let answered = std::cell::Cell::new(0);
        // Every bound is at least the candidates it counts, and exists exactly when they do.
        let got = |f: Value| {
            let f = filter(f);
            let (candidates, bound) = (ix.candidates(&f, &none), ix.bound(&f));
            assert_eq!(candidates.is_some(), bound.is_some(), "{f:?}");
            if let (Some(c), Some(b)) = (&candidates, bound) {
                assert!(b >= c.len(), "{f:?}: bound {b} below {}", c.len());
            }
            // Where the indexes answer the filter, their candidates are exactly its matches.
            if ix.answers(&f) {
                let matching = matching(&f, &entries, &|key| ix.is_text(key));
                assert_eq!(candidates.as_deref(), Some(&matching[..]), "{f:?}");
                answered.set(answered.get() + 1);
            }
            candidates
        };
        let must = |c: Value| got(json!({"must": [c]}));
        assert_eq!(
            must(json!({"key": "doc", "match": {"value": "a"}})),
            Some(vec![0, 1])
        );
        assert_eq!(
            must(json!({"key": "doc", "match": {"any": ["b", "c"]}})),
            Some(vec![1, 2])
        );
        assert_eq!(
            must(json!({"key": "meta.doc", "match": {"value": "a"}})),
            Some(vec![3])
        );
        assert_eq!(
            must(json!({"key": "n", "match": {"value": 2}})),
            Some(vec![1])
        );
        // A string asked of an integer index: the index never saw point 2's "2".
        assert_eq!(must(json!({"key": "n", "match": {"value": "2"}})), None);
        // Fractions at an integer key are held too: the filter would pass them.
        assert_eq!(
            must(json!({"key": "n", "range": {"gte": 1.5}})),
            Some(vec![1, 3])
        );
        assert_eq!(
            must(json!({"key": "n", "match": {"value": 1.0}})),
            Some(vec![0])
        );
        assert_eq!(
            must(json!({"key": "x", "range": {"gt": 0.5, "lte": 9}})),
            Some(vec![1])
        );
        assert_eq!(
            must(json!({"key": "x", "range": {"gt": 2, "lt": 1}})),
            Some(vec![])
        );
        assert_eq!(
            must(json!({"key": "ok", "match": {"value": false}})),
            Some(vec![1])
        );
        assert_eq!(
            must(json!({"key": "u", "match": {"value": "a0eebc999c0b4ef8bb6d6bb9bd380a11"}})),
            Some(vec![2])
        );
        assert_eq!(
            must(json!({"key": "body", "match": {"text": "QUICK"}})),
            Some(vec![0, 3])
        );
        assert_eq!(
            must(json!({"key": "body", "match": {"text": "quick dog"}})),
            Some(vec![3])
        );
        assert_eq!(
            must(json!({"key": "body", "match": {"text": "cat"}})),
            Some(vec![])
        );
        assert_eq!(
            must(json!({"key": "body", "match": {"text_any": "cat LAZY quick"}})),
            Some(vec![0, 1, 3])
        );
        assert_eq!(
            must(json!({"key": "body", "match": {"text_any": "cat"}})),
            Some(vec![])
        );
        // A keyword index lists the values with the prefix; a text index leaves it to the
        // full check (Qdrant's indexes do the same).
        assert_eq!(
            must(json!({"key": "doc", "match": {"prefix": ""}})),
            Some(vec![0, 1, 2])
        );
        assert_eq!(
            must(json!({"key": "body", "match": {"prefix": "The"}})),
            None
        );
        // Unindexed keys and conditions no index bounds leave the filter to the full check.
        assert_eq!(must(json!({"key": "zzz", "match": {"value": "a"}})), None);
        assert_eq!(
            must(json!({"key": "doc", "match": {"except": ["a"]}})),
            None
        );
        // must narrows; nested filters and should (when every branch is bounded) too.
        assert_eq!(
            got(json!({"must": [{"key": "doc", "match": {"value": "a"}},
                                {"must": [{"key": "n", "match": {"value": 1}}]}]})),
            Some(vec![0])
        );
        assert_eq!(
            got(json!({"should": [{"key": "doc", "match": {"value": "c"}},
                                  {"key": "ok", "match": {"value": true}}]})),
            Some(vec![0, 2])
        );
        assert_eq!(
            got(json!({"should": [{"key": "doc", "match": {"value": "c"}},
                                  {"key": "zzz", "match": {"value": 1}}]})),
            None
        );
        assert_eq!(got(json!({"should": []})), Some(vec![]));
        let by_id = |id: &PointId| match id {
            PointId::Num(n) if *n < 4 => Some(*n as Slot),
            PointId::Num(_) | PointId::Uuid(_) => None,
        };
        assert_eq!(
            ix.candidates(&filter(json!({"must": [{"has_id": [3, 1, 99]}]})), &by_id),
            Some(vec![1, 3])
        );
        // Most single tests are answered exactly; UUIDs, `except` and `should` are not.
        assert!(answered.get() >= 12, "{}", answered.get());
        for partial in [
            json!({"must": [{"key": "u", "match": {"value": "a0eebc999c0b4ef8bb6d6bb9bd380a11"}}]}),
            json!({"should": [{"key": "doc", "match": {"value": "c"}}]}),
            json!({"must": [{"key": "doc", "match": {"value": "a"}}, {"key": "zzz", "match": {"value": 1}}]}),
            json!({"must": [{"key": "n", "match": {"value": 1}, "range": {"gte": 0}}]}),
            json!({"must": [{"key": "doc", "match": {"value": "a"}}], "must_not": [{"has_id": [0]}]}),
        ] {
            assert!(!ix.answers(&filter(partial.clone())), "{partial}");
        }
    }

    /// Geo cells and datetime lists hold every slot that passes, wherever the region lies
    /// (poles, the antimeridian, regions of many rows); datetime ranges are answered exactly.
    #[test]
    fn geo_and_datetime_candidates_hold_every_match() {
        let mut seed = 11u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let entries: Vec<Option<Payload>> = (0..2000)
            .map(|i| {
                let (lon, lat) = (next() * 360.0 - 180.0, next() * 180.0 - 90.0);
                // Every fifth point is near a pole or the antimeridian.
                let (lon, lat) = if i % 5 == 0 {
                    (179.99 - lon.abs() / 1000.0, lat.signum() * 89.9)
                } else {
                    (lon, lat)
                };
                let micros = (next() * 1e15) as i64;
                let when = cairn_api::Datetime::from_micros(micros).to_string();
                payload(json!({"at": {"lon": lon, "lat": lat}, "when": when}))
            })
            .collect();
        let ix = indexes(
            &entries,
            &[
                ("at", PayloadSchemaType::Geo),
                ("when", PayloadSchemaType::Datetime),
            ],
        );
        let none = |_: &PointId| None;
        let mut matched_rounds = 0;
        let point = |next: &mut dyn FnMut() -> f64| json!({"lon": next() * 360.0 - 180.0, "lat": next() * 180.0 - 90.0});
        for round in 0..300 {
            let condition = match round % 4 {
                0 => {
                    json!({"key": "at", "geo_radius": {"center": point(&mut next), "radius": 10f64.powf(next() * 7.3)}})
                }
                1 => {
                    let (a, b) = (point(&mut next), point(&mut next));
                    let (north, south) = (
                        a["lat"].as_f64().unwrap().max(b["lat"].as_f64().unwrap()),
                        a["lat"].as_f64().unwrap().min(b["lat"].as_f64().unwrap()),
                    );
                    json!({"key": "at", "geo_bounding_box": {"top_left": {"lon": a["lon"], "lat": north}, "bottom_right": {"lon": b["lon"], "lat": south}}})
                }
                2 => {
                    let ring: Vec<Value> = (0..5).map(|_| point(&mut next)).collect();
                    let mut ring = ring;
                    ring.push(ring[0].clone());
                    json!({"key": "at", "geo_polygon": {"exterior": {"points": ring}}})
                }
                _ => {
                    let (a, b) = ((next() * 1e15) as i64, (next() * 1e15) as i64);
                    let at = |t: i64| cairn_api::Datetime::from_micros(t).to_string();
                    json!({"key": "when", "range": {"gte": at(a.min(b)), "lt": at(a.max(b))}})
                }
            };
            let f = filter(json!({"must": [condition]}));
            let candidates = ix.candidates(&f, &none).unwrap();
            let matching = matching(&f, &entries, &no_text_keys);
            if ix.answers(&f) {
                assert_eq!(candidates, matching, "{f:?}");
            } else {
                assert!(
                    matching.iter().all(|s| candidates.binary_search(s).is_ok()),
                    "{f:?}"
                );
            }
            matched_rounds += usize::from(!matching.is_empty());
        }
        assert!(
            matched_rounds > 150,
            "{matched_rounds} of 300 rounds matched anything"
        );
    }

    #[test]
    fn sync_builds_new_keys_drops_old_ones_and_counts_live_points() {
        let entries = [
            payload(json!({"doc": "a"})),
            payload(json!({"doc": "b", "n": 1})),
        ];
        let mut ix = indexes(&entries, &[("doc", PayloadSchemaType::Keyword)]);
        ix.add(2, payload(json!({"doc": "a"})).as_ref());
        assert_eq!(ix.points(|s| s != 0)["doc"], 2);
        let schema = PayloadSchema::from([("n".to_owned(), PayloadSchemaType::Integer)]);
        ix.sync(&schema, slots(&entries));
        assert_eq!(
            ix.points(|_| true).into_iter().collect::<Vec<_>>(),
            [("n".to_owned(), 1)]
        );
        let none = |_: &PointId| None;
        let doc = filter(json!({"must": [{"key": "doc", "match": {"value": "a"}}]}));
        assert_eq!(ix.candidates(&doc, &none), None);
    }
}
