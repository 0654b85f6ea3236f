"""Checks an ONNX model file before the importer allocates anything for it (issue #28).

A model file is untrusted input: random bytes, a truncated download, a graph whose names do not
connect, a tensor that claims gigabytes but stores 48 bytes, external data that points outside
the model's folder. Each of those is refused here with a typed error that names the tensor or
node and the remedy, the decoder's own exception kept as ``__cause__``:

- :class:`ModelFormatError`: not decodable, empty, no graph, dangling or cyclic names, an arity or
  required attribute the op's ONNX schema does not allow, a tensor whose bytes differ from its
  declared shape, external data that is missing, outside the model's folder or lying about its
  length;
- :class:`ShapeError`: a declared dimension that is negative or above :data:`MAX_DIM`, a static
  input larger than this host's memory;
- :class:`UnsupportedDTypeError`: operands that ONNX's schema requires to share one type (``Add``
  of float and int64) or a type the op does not accept.

:func:`load_model` decodes and checks the storage (before any tensor is read);
:func:`check_graph` checks the graph against the ONNX schemas of the model's opset. Constants
the importer folds (``ConstantOfShape``, ``Range``, ``Expand``, ``Tile`` ...) are bounded where
they are built (:func:`neurenix_core.graph.importers.builder.check_constant_bytes`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neurenix_core.errors import ModelFormatError, ShapeError, UnsupportedDTypeError

__all__ = ["MAX_DIM", "check_graph", "host_memory_bytes", "load_model"]

#: The largest size one declared dimension may have. 2**31 - 1 is what ONNX Runtime, TFLite
#: and OpenVINO index an axis with; a file declaring more is corrupt or hostile.
MAX_DIM = 2**31 - 1

_FIX_FILE = "re-export or download the model again"

#: Elements packed below one byte: raw_data holds ceil(n * bits / 8) bytes for them.
_PACKED_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2, "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}


def host_memory_bytes() -> int:
    """This host's physical memory: no tensor a model declares can be larger and still load."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): only the per-axis bound applies
        return 2**63 - 1


# ----------------------------------------------------------------------------- decoding
def load_model(model: Any) -> Any:
    """The ``onnx.ModelProto`` of a path, bytes or ModelProto, checked before any tensor is read;
    external data is read here, from the model's folder only."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        _check_storage(model, "from_onnx(<ModelProto>)", None)
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        source = f"from_onnx(<{len(model)} bytes>)"
        if not len(model):
            raise ModelFormatError(f"{source}: the bytes are empty, not an ONNX model; pass the model file's contents")
        proto = _decode(lambda: onnx.load_from_string(bytes(model)), source)
        _check_storage(proto, source, None)
        return proto
    path = Path(model)
    source = f"from_onnx({path})"
    if not path.is_file():
        raise ModelFormatError(f"from_onnx: {path} is not a file; pass a path to a .onnx file, its bytes or an onnx.ModelProto")
    if path.stat().st_size == 0:
        raise ModelFormatError(f"{source}: the file is empty (0 bytes), not an ONNX model; {_FIX_FILE}")
    # External data is left unread by onnx: it is read below, after its locations are checked.
    proto = _decode(lambda: onnx.load(str(path), load_external_data=False), source)
    _check_storage(proto, source, path.parent)
    return proto


def _decode(read: Any, source: str) -> Any:
    try:
        proto = read()
    except Exception as exc:  # protobuf's DecodeError, RuntimeWarning-as-error, ValueError ...: all mean "not a model"
        raise ModelFormatError(f"{source}: not a readable ONNX model ({type(exc).__name__}: {str(exc)[:200]}); the file is "
                               f"corrupted, truncated or of another format; {_FIX_FILE}") from exc
    # Protobuf decodes many byte strings without complaint (an empty message is valid): a model
    # must at least have a graph with an output and an IR version.
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.graph.output:
        raise ModelFormatError(f"{source}: decodes to no ONNX model (ir_version {proto.ir_version}, "
                               f"{'a graph' if proto.HasField('graph') else 'no graph'}, {len(proto.graph.output)} outputs); "
                               f"the file is corrupted, truncated or of another format; {_FIX_FILE}")
    return proto


# ----------------------------------------------------------------------------- tensors and their bytes
def _graphs(graph: Any) -> Iterator[Any]:
    """``graph`` and every subgraph (If / Loop / Scan bodies) below it."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _tensors(proto: Any) -> Iterator[tuple[str, Any]]:
    """Every TensorProto the model stores, with a description naming it."""
    for graph in _graphs(proto.graph):
        for init in graph.initializer:
            yield f"initializer {init.name!r}", init
        for sparse in graph.sparse_initializer:
            yield f"sparse initializer {sparse.values.name!r} values", sparse.values
            yield f"sparse initializer {sparse.values.name!r} indices", sparse.indices
        for node in graph.node:
            for attr in node.attribute:
                where = f"node {node.name or node.op_type!r} attribute {attr.name!r}"
                if attr.HasField("t"):
                    yield where, attr.t
                for t in attr.tensors:
                    yield where, t
                if attr.HasField("sparse_tensor"):
                    yield where + " values", attr.sparse_tensor.values
                    yield where + " indices", attr.sparse_tensor.indices


def _check_storage(proto: Any, source: str, folder: Path | None) -> None:
    """Every stored tensor's bytes against its declared shape; external data confined to
    ``folder`` and read from there (a model given as bytes or a ModelProto has no folder)."""
    limit = host_memory_bytes()
    external: list[tuple[str, Any, int | None]] = []
    for what, tensor in _tensors(proto):
        nbytes = _declared_bytes(tensor, what, source, limit)
        if tensor.data_location == _external():
            external.append((what, tensor, nbytes))
        else:
            _check_inline(tensor, what, source, nbytes)
    total = sum(n for _, _, n in external if n is not None)  # strings (None) have no fixed size
    if total > limit:
        raise ModelFormatError(f"{source}: the external data declares {total} bytes in all, more than this host's memory "
                               f"({limit} bytes); run the model on a host with more memory or {_FIX_FILE}")
    for what, tensor, nbytes in external:
        if folder is None:
            raise ModelFormatError(f"{source}: {what} keeps its data in an external file, which needs the model's folder to "
                                   "be found; pass the path of the .onnx file instead of its bytes or a ModelProto")
        _read_external(tensor, what, source, folder, nbytes)


def _external() -> int:
    from onnx import TensorProto

    return TensorProto.EXTERNAL


def _declared_bytes(tensor: Any, what: str, source: str, limit: int) -> int | None:
    """The bytes ``tensor``'s dims and type call for (None for strings, which have no fixed
    size); a negative dimension or a size above the host's memory is refused."""
    from onnx import TensorProto

    dims = list(tensor.dims)
    if any(d < 0 for d in dims):
        raise ModelFormatError(f"{source}: {what} declares dimensions {dims}; sizes are 0 or more; {_FIX_FILE}")
    if tensor.HasField("segment"):
        raise ModelFormatError(f"{source}: {what} is stored in segments, which ONNX itself does not load; re-export the model")
    name = TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in TensorProto.DataType.values() else None
    if name in (None, "UNDEFINED"):
        raise ModelFormatError(f"{source}: {what} has element type {tensor.data_type}, which is no ONNX type; {_FIX_FILE}")
    if name == "STRING":
        return None
    count = math.prod(dims)
    nbytes = -(-count * _PACKED_BITS[name] // 8) if name in _PACKED_BITS else count * _itemsize(tensor.data_type)
    if nbytes > limit:
        raise ModelFormatError(f"{source}: {what} declares shape {dims} of {name.lower()} ({nbytes} bytes), more than this "
                               f"host's memory ({limit} bytes); {_FIX_FILE}")
    return nbytes


def _itemsize(data_type: int) -> int:
    from onnx import helper

    return int(helper.tensor_dtype_to_np_dtype(data_type).itemsize)


def _check_inline(tensor: Any, what: str, source: str, nbytes: int | None) -> None:
    """Data in the file itself: raw_data holds exactly the declared bytes, a typed field
    (float_data, int64_data ...) exactly the declared elements."""
    from onnx import TensorProto, helper

    count = math.prod(tensor.dims)
    if tensor.HasField("raw_data"):
        if nbytes is not None and len(tensor.raw_data) != nbytes:
            raise ModelFormatError(f"{source}: {what} declares shape {list(tensor.dims)} ({nbytes} bytes) but stores "
                                   f"{len(tensor.raw_data)} bytes; the file is truncated or corrupted; {_FIX_FILE}")
        return
    stored = len(getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type)))
    name = TensorProto.DataType.Name(tensor.data_type)
    if name in ("COMPLEX64", "COMPLEX128"):
        stored //= 2  # a real and an imaginary entry per element
    if name in _PACKED_BITS:
        count = -(-count * _PACKED_BITS[name] // 8)  # packed types keep one byte of the packed stream per int32 entry
    if stored != count:
        raise ModelFormatError(f"{source}: {what} declares shape {list(tensor.dims)} ({count} elements) but stores {stored}; "
                               f"the file is truncated or corrupted; {_FIX_FILE}")


def _external_fields(tensor: Any, what: str, source: str) -> tuple[str, int, int | None]:
    fields = {e.key: e.value for e in tensor.external_data}
    location = fields.get("location", "")
    try:
        offset = int(fields.get("offset", "0"))
        length = int(fields["length"]) if "length" in fields else None
    except ValueError as exc:
        raise ModelFormatError(f"{source}: {what} has external data offset/length {fields.get('offset')!r}/"
                               f"{fields.get('length')!r}, which are not integers; {_FIX_FILE}") from exc
    if offset < 0 or (length is not None and length < 0):
        raise ModelFormatError(f"{source}: {what} has a negative external data offset or length ({offset}, {length}); {_FIX_FILE}")
    return location, offset, length


def _external_path(location: str, what: str, source: str, folder: Path) -> Path:
    """The file ``location`` names, refused unless it lies inside ``folder`` once every symlink
    is resolved: a model must not make the importer read anything else on the host."""
    if not location:
        raise ModelFormatError(f"{source}: {what} keeps its data externally but names no file (no 'location'); {_FIX_FILE}")
    parts = Path(location).parts
    if Path(location).is_absolute() or location.startswith(("/", "\\")) or ".." in parts or ".." in location.replace("\\", "/").split("/"):
        raise ModelFormatError(f"{source}: {what} keeps its data in {location!r}, outside the model's folder (absolute or '..' "
                               "paths are refused); put the data file next to the .onnx file and name it relative to it")
    base = folder.resolve()
    target = (base / location).resolve()
    if not target.is_relative_to(base):
        raise ModelFormatError(f"{source}: {what} keeps its data in {location!r}, which resolves to {target}, outside the "
                               f"model's folder {base} (a symlink); copy the data file into the model's folder")
    if not target.is_file():
        raise ModelFormatError(f"{source}: {what} keeps its data in {location!r}, which does not exist in {base}; copy the "
                               "external data file next to the .onnx file")
    return target


def _read_external(tensor: Any, what: str, source: str, folder: Path, nbytes: int | None) -> None:
    """Check ``tensor``'s external data (inside the folder, long enough, length as declared)
    and move its bytes into raw_data, so nothing later reads a path."""
    from onnx import TensorProto

    location, offset, length = _external_fields(tensor, what, source)
    if nbytes is None:
        raise ModelFormatError(f"{source}: {what} is a string tensor kept in external data, which ONNX does not define; {_FIX_FILE}")
    target = _external_path(location, what, source, folder)
    if length is not None and length != nbytes:
        raise ModelFormatError(f"{source}: {what} declares shape {list(tensor.dims)} ({nbytes} bytes) but its external data "
                               f"length is {length}; {_FIX_FILE}")
    size = target.stat().st_size
    if offset + nbytes > size:
        raise ModelFormatError(f"{source}: {what} needs bytes {offset}..{offset + nbytes} of {location!r}, which holds {size}; "
                               f"the data file is truncated or belongs to another model; {_FIX_FILE}")
    with open(target, "rb") as fh:
        fh.seek(offset)
        data = fh.read(nbytes)
    tensor.raw_data = data
    del tensor.external_data[:]
    tensor.data_location = TensorProto.DEFAULT


# ----------------------------------------------------------------------------- the graph
def check_graph(proto: Any) -> None:
    """The graph's names, arities, attributes, declared dims and operand types (ONNX schemas of
    the model's own opset), before anything is built."""
    source = f"from_onnx({proto.graph.name or 'model'})"
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in proto.opset_import}
    limit = host_memory_bytes()
    for vi in proto.graph.input:
        _check_dims(vi, source, limit)
    for vi in list(proto.graph.output) + list(proto.graph.value_info):
        _check_dims(vi, source, None)
    _check_names(proto.graph, set(), source, opsets)
    _check_types(proto, source, opsets)


def _check_dims(vi: Any, source: str, limit: int | None) -> None:
    """Declared sizes: none negative, none above MAX_DIM; a static input (``limit`` given) no
    larger than the host's memory."""
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
        return
    dims = [int(d.dim_value) if d.HasField("dim_value") else None for d in t.shape.dim]
    for axis, d in enumerate(dims):
        if d is not None and d < 0:
            raise ShapeError(f"{source}: {vi.name!r} declares size {d} on axis {axis}; sizes are 0 or more (a dynamic axis has a "
                             f"dim_param); {_FIX_FILE}")
        if d is not None and d > MAX_DIM:
            raise ShapeError(f"{source}: {vi.name!r} declares size {d} on axis {axis}, above the limit of {MAX_DIM} per axis; "
                             f"{_FIX_FILE}")
    if limit is not None and None not in dims and t.elem_type in _sized_types():
        nbytes = math.prod(dims) * _itemsize(t.elem_type)  # type: ignore[arg-type]
        if nbytes > limit:
            raise ShapeError(f"{source}: input {vi.name!r} declares shape {dims} ({nbytes} bytes), more than this host's memory "
                             f"({limit} bytes); export the model with a dynamic axis (dim_param) or smaller sizes")


def _sized_types() -> set[int]:
    from onnx import TensorProto

    skip = {"UNDEFINED", "STRING", *_PACKED_BITS}
    return {v for k, v in TensorProto.DataType.items() if k not in skip}


def _node_label(node: Any, index: int) -> str:
    return f"node {node.name or f'{node.op_type}_{index}'!r} ({node.op_type})"


def _check_names(graph: Any, outer: set[str], source: str, opsets: dict[str, int]) -> None:
    """Every name a node reads is defined before it (inputs, initializers, an earlier node, an
    enclosing graph), each name is assigned once, every graph output is defined; each node's
    arity and required attributes fit its schema. Subgraphs see the names defined so far."""
    defined = set(outer) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {s.values.name for s in graph.sparse_initializer}
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    own: set[str] = set()
    for i, node in enumerate(graph.node):
        for x in node.input:
            if x and x not in defined:
                _refuse_undefined(graph, i, x, producer, source)
        _check_schema(node, i, source, opsets)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _check_names(sub, defined, source, opsets)
        for out in node.output:
            if out and out in own:
                raise ModelFormatError(f"{source}: {_node_label(node, i)} assigns {out!r}, which an earlier node already "
                                       f"assigned (ONNX graphs assign each name once); {_FIX_FILE}")
            own.add(out)
        defined |= {o for o in node.output if o}
    for out in graph.output:
        if out.name not in defined:
            raise ModelFormatError(f"{source}: graph output {out.name!r} is computed by no node and is no input or "
                                   f"initializer (a dangling output); {_FIX_FILE}")


def _refuse_undefined(graph: Any, index: int, name: str, producer: dict[str, int], source: str) -> None:
    node = graph.node[index]
    if name not in producer:
        raise ModelFormatError(f"{source}: {_node_label(node, index)} reads {name!r}, which no node, input or initializer "
                               f"defines (a dangling input); {_FIX_FILE}")
    cycle = _cycle_through(graph, index, producer)
    if cycle:
        names = " -> ".join(_node_label(graph.node[j], j) for j in cycle)
        raise ModelFormatError(f"{source}: the graph has a cycle: {names}; ONNX graphs are acyclic; {_FIX_FILE}")
    raise ModelFormatError(f"{source}: {_node_label(node, index)} reads {name!r} before "
                           f"{_node_label(graph.node[producer[name]], producer[name])} computes it; ONNX requires nodes in "
                           "topological order; re-export the model (or sort it with onnx's tools)")


def _cycle_through(graph: Any, start: int, producer: dict[str, int]) -> list[int]:
    """The nodes of a cycle through node ``start`` (following inputs to their producers), if any."""
    stack: list[tuple[int, list[int]]] = [(start, [start])]
    seen: set[int] = set()
    while stack:
        i, path = stack.pop()
        for x in graph.node[i].input:
            j = producer.get(x)
            if j is None:
                continue
            if j == start:
                return path + [start]
            if j not in seen:
                seen.add(j)
                stack.append((j, path + [j]))
    return []


def _schema(node: Any, opsets: dict[str, int]) -> Any:
    """The ONNX schema of ``node`` at the model's opset; None for ops ONNX does not define
    (custom domains: the importer refuses those by name)."""
    from onnx import defs

    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in opsets:
        return None
    try:
        return defs.get_schema(node.op_type, opsets[domain], domain)
    except defs.SchemaError:
        return None


def _check_schema(node: Any, index: int, source: str, opsets: dict[str, int]) -> None:
    """Input / output counts and required attributes as the op's schema defines them."""
    from onnx.defs import OpSchema

    schema = _schema(node, opsets)
    if schema is None:
        return
    label = _node_label(node, index)
    n_in, n_out = len(node.input), len(node.output)
    if not schema.min_input <= n_in <= schema.max_input:
        raise ModelFormatError(f"{source}: {label} has {n_in} inputs; {node.op_type} takes {schema.min_input} to "
                               f"{schema.max_input}; {_FIX_FILE}")
    # Fewer outputs than the schema lists are read as "the rest unused" (the importer builds only
    # the outputs a model uses); more than the op has cannot mean anything.
    if n_out > schema.max_output:
        raise ModelFormatError(f"{source}: {label} has {n_out} outputs; {node.op_type} gives at most {schema.max_output}; "
                               f"{_FIX_FILE}")
    for formal, name in zip(schema.inputs, node.input):
        if formal.option == OpSchema.FormalParameterOption.Single and not name:
            raise ModelFormatError(f"{source}: {label} leaves its required input {formal.name!r} empty; {_FIX_FILE}")
    given = {a.name for a in node.attribute}
    missing = sorted(k for k, a in schema.attributes.items() if a.required and k not in given)
    if missing:
        raise ModelFormatError(f"{source}: {label} lacks the required attribute(s) {missing}; {_FIX_FILE}")


# ----------------------------------------------------------------------------- operand types
_STRING = 8  # TensorProto.STRING


def _type_name(elem: int) -> str:
    from onnx import TensorProto

    return TensorProto.DataType.Name(elem).lower()


def _known_types(proto: Any) -> dict[str, int]:
    """The element type of every tensor value the model declares or ONNX's type inference
    derives (run on a copy without the large weights: inference needs only their types)."""
    types = _declared_types(proto.graph)
    for vi in _inferred_value_info(proto):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.elem_type and vi.name not in types:
            types[vi.name] = t.elem_type
    return types


def _declared_types(graph: Any) -> dict[str, int]:
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(graph.input) + list(graph.value_info)
             if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
    types |= {init.name: init.data_type for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            attr = {a.name: a for a in node.attribute}
            if "value" in attr:
                types[node.output[0]] = attr["value"].t.data_type
            for key, elem in (("value_float", 1), ("value_floats", 1), ("value_int", 7), ("value_ints", 7), ("value_string", _STRING),
                              ("value_strings", _STRING)):
                if key in attr:
                    types[node.output[0]] = elem
    return types


def _inferred_value_info(proto: Any) -> list[Any]:
    import onnx

    light = onnx.ModelProto()
    light.ir_version = proto.ir_version
    light.opset_import.extend(proto.opset_import)
    g = light.graph
    g.node.extend(proto.graph.node)
    g.input.extend(proto.graph.input)
    g.output.extend(proto.graph.output)
    g.value_info.extend(proto.graph.value_info)
    present = {vi.name for vi in proto.graph.input}
    for init in proto.graph.initializer:
        # Small initializers keep their values (a Reshape target, Slice bounds); large ones are
        # typed inputs, so inference never copies the weights.
        if len(init.raw_data) + len(init.float_data) + len(init.int64_data) <= 4096:
            g.initializer.append(init)
        elif init.name not in present:
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    light.functions.extend(proto.functions)
    try:
        return list(onnx.shape_inference.infer_shapes(light).graph.value_info)
    except Exception:  # noqa: BLE001 - inference is a help only; the declared types are checked in any case
        return []


def _check_types(proto: Any, source: str, opsets: dict[str, int]) -> None:
    """Operands an op's schema binds to one type parameter (``Add``'s A and B are both T) have
    one type, and each is a type the parameter allows."""
    types = _known_types(proto)
    for i, node in enumerate(proto.graph.node):
        schema = _schema(node, opsets)
        if schema is None or not schema.inputs:
            continue
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        bound: dict[str, tuple[str, int]] = {}
        for k, name in enumerate(node.input):
            formal = schema.inputs[min(k, len(schema.inputs) - 1)]
            if not name or name not in types:
                continue
            elem, param = types[name], formal.type_str
            # Only strings are held to the schema's type list: neurenix computes some ops in more
            # numeric types than ONNX lists (Celu in float16, BitShift on signed ints), and refuses
            # storage types with its own message; a string would become an object array.
            if elem == _STRING and param in allowed and "tensor(string)" not in allowed[param] and \
                    any(s.startswith("tensor(") for s in allowed[param]):
                kinds = ", ".join(sorted(s[7:-1] for s in allowed[param]))
                raise UnsupportedDTypeError(f"{source}: {_node_label(node, i)} takes {name!r} of type {_type_name(elem)}, which "
                                            f"ONNX's {node.op_type} does not accept ({param}: {kinds}); insert a Cast in the "
                                            "model before this node (re-export)")
            if param not in allowed or not formal.is_homogeneous:
                continue  # a heterogeneous variadic (Loop's carried values) binds one type per operand
            first = bound.setdefault(param, (name, elem))
            if first[1] != elem:
                raise UnsupportedDTypeError(
                    f"{source}: {_node_label(node, i)} has operands of different types: {first[0]!r} is {_type_name(first[1])} "
                    f"and {name!r} is {_type_name(elem)}, but ONNX's {node.op_type} requires one type for both ({param}); "
                    "insert a Cast in the model so both operands have the same type (re-export)")
