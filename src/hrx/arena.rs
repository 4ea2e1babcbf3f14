//! Arena planning by lifetimes: each transient storage lives from its producer to the last
//! reader of it or of any alias of it; storages whose lifetimes do not overlap share bytes.
//! A node whose value has one reader that the backend fuses with it, reserving the bytes
//! (`Fusion::reserve`), keeps its inputs alive through that reader too: the fused kernel writes
//! the reader's output while the node's inputs are still being read, so that output must not
//! take their bytes.

use super::{Class, Import, Loc};
use crate::graph::{Graph, NodeId, Op};

/// Offsets are aligned for any kernel's vector loads (and Vulkan's storage-buffer alignment).
pub const ALIGN: usize = 256;

/// Addresses of every value and the arena size.
pub fn assign(graph: &Graph, import: &Import, reserved: &dyn Fn(NodeId, NodeId) -> bool) -> (Vec<Option<Loc>>, usize) {
    let n = graph.nodes.len();
    // Lifetime of each owner's storage: [first, last] node index.
    let mut last_use: Vec<usize> = (0..n).collect();
    // The one reader of each value that has exactly one (graph outputs have another).
    let mut readers = vec![0usize; n];
    let mut sole_reader: Vec<usize> = (0..n).collect();
    for (i, node) in graph.nodes.iter().enumerate() {
        for input in &node.inputs {
            readers[input.0] += 1;
            sole_reader[input.0] = i;
        }
    }
    for out in &graph.outputs {
        readers[out.0] += 1;
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        let until = if readers[i] == 1 && sole_reader[i] > i && reserved(NodeId(i), NodeId(sole_reader[i])) {
            sole_reader[i]
        } else {
            i
        };
        for input in &node.inputs {
            if let Some(owner) = import.storage_owner[input.0] {
                last_use[owner.0] = last_use[owner.0].max(until);
            }
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
