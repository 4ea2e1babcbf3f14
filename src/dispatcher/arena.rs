//! Arena planning by lifetimes: each transient storage lives from its producer to the last
//! reader of it or of any alias of it; storages whose lifetimes do not overlap share bytes.
//! A node computed inside a later node's dispatch (a fused pair that reserves its bytes, a
//! producer folded into its readers) keeps its inputs alive through that dispatch too: the
//! dispatch writes its output while those inputs are still being read, so that output must not
//! take their bytes.

use super::{Class, Import, Loc};
use crate::graph::{Graph, NodeId, Op};

/// Offsets are aligned for any kernel's vector loads (and Vulkan's storage-buffer alignment).
pub const ALIGN: usize = 256;

/// Addresses of every value and the arena size.
/// `keep_alive`: values read until a later node than their last reader (node index): the
/// inputs of a node computed inside a later node's dispatch.
pub fn assign(graph: &Graph, import: &Import, keep_alive: &[(NodeId, usize)]) -> (Vec<Option<Loc>>, usize) {
    let n = graph.nodes.len();
    // Lifetime of each owner's storage: [first, last] node index.
    let mut last_use: Vec<usize> = (0..n).collect();
    for (i, node) in graph.nodes.iter().enumerate() {
        for input in &node.inputs {
            if let Some(owner) = import.storage_owner[input.0] {
                last_use[owner.0] = last_use[owner.0].max(i);
            }
        }
    }
    for &(value, until) in keep_alive {
        if let Some(owner) = import.storage_owner[value.0] {
            last_use[owner.0] = last_use[owner.0].max(until);
        }
    }
    for out in &graph.outputs {
        if let Some(owner) = import.storage_owner[out.0] {
            last_use[owner.0] = n;
        }
    }
    let mut owners: Vec<NodeId> = (0..n)
        .map(NodeId)
        .filter(|&id| import.class[id.0] == Class::Transient && import.storage_owner[id.0] == Some(id))
        .collect();
    // Largest first, then first-fit against already placed storages whose lifetimes overlap.
    owners.sort_by_key(|&id| (std::cmp::Reverse(graph.value(id).extent_bytes()), id.0));
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (start, end, offset, size)
    let mut offsets = vec![None; n];
    let mut arena_bytes = 0;
    for id in owners {
        let size = graph.value(id).extent_bytes().div_ceil(ALIGN) * ALIGN;
        let (start, end) = (id.0, last_use[id.0]);
        let mut overlapping: Vec<(usize, usize)> =
            placed.iter().filter(|&&(s, e, _, _)| s <= end && start <= e).map(|&(_, _, o, sz)| (o, sz)).collect();
        overlapping.sort();
        let mut offset = 0;
        for (o, sz) in overlapping {
            if offset + size <= o {
                break;
            }
            offset = offset.max(o + sz);
        }
        placed.push((start, end, offset, size));
        offsets[id.0] = Some(offset);
        arena_bytes = arena_bytes.max(offset + size);
    }
    let mut locs: Vec<Option<Loc>> = vec![None; n];
    for (i, node) in graph.nodes.iter().enumerate() {
        locs[i] = if let Some((storage, offset)) = node.value.external {
            Some(Loc::External { storage, offset })
        } else if node.op == Op::External {
            None
        } else if let Some(offset) = offsets[i] {
            Some(Loc::Arena { offset })
        } else if node.op.is_layout() {
            locs[node.inputs[0].0].map(|l| l.plus(node.value.view_offset))
        } else {
            None
        };
    }
    (locs, arena_bytes)
}
