"""The policy digest: sha256 over an ONNX model's whole graph, without the onnx package.

Definition (shared with the exporter): the sha256 of the serialized ``model.graph`` (GraphProto:
nodes, initializers, constants, inputs and outputs). With the onnx package that is
``hashlib.sha256(model.graph.SerializeToString())``; here the same bytes are sliced out of the
file by walking the protobuf wire format, so the robot needs only onnxruntime. The metadata
(where the digest itself lives) is outside the graph, so the digest does not depend on it, but
any change of a weight or of the computation (an extra node, a changed constant) does.
"""

import hashlib

MODEL_GRAPH_FIELD = 7
"""ModelProto.graph field number."""

GRAPH_INITIALIZER_FIELD = 5
"""GraphProto.initializer field number."""


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def _varint(blob, pos):
    """Decode one base-128 varint at pos; return (value, next position)."""
    value, shift = 0, 0
    while True:
        if pos >= len(blob) or shift > 63:
            raise WireError('truncated or overlong varint')
        byte = blob[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(blob):
    """Yield (field number, wire type, value) of a protobuf message; bytes for wire type 2."""
    pos, end = 0, len(blob)
    while pos < end:
        key, pos = _varint(blob, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(blob, pos)
        elif wire == 1:
            value, pos = blob[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(blob, pos)
            value, pos = blob[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = blob[pos : pos + 4], pos + 4
        else:
            raise WireError(f'unsupported wire type {wire}')
        if pos > end:
            raise WireError('field runs past the end of the message')
        yield number, wire, value


def initializer_bytes(model_blob):
    """Return the serialized TensorProto bytes of each graph initializer, in graph order."""
    tensors = []
    for number, wire, graph in fields(memoryview(model_blob)):
        if number == MODEL_GRAPH_FIELD and wire == 2:
            for inner, inner_wire, value in fields(graph):
                if inner == GRAPH_INITIALIZER_FIELD and inner_wire == 2:
                    tensors.append(bytes(value))
    return tensors


TENSOR_NAME_FIELD = 8
"""TensorProto.name field number."""

TENSOR_EXTERNAL_DATA_FIELD = 13
"""TensorProto.external_data field number: present only when a tensor's bytes live elsewhere."""

TENSOR_DATA_LOCATION_FIELD = 14
"""TensorProto.data_location field number (1: EXTERNAL)."""


def external_initializers(model_blob):
    """Names of the graph initializers whose data lives outside the model's own bytes.

    Such a tensor is read from a side file that neither the file's sha256, its signature nor
    the weights digest covers (raises WireError on malformed bytes).
    """
    names = []
    for tensor in initializer_bytes(model_blob):
        found = {number: value for number, _, value in fields(memoryview(tensor))}
        if TENSOR_EXTERNAL_DATA_FIELD in found or found.get(TENSOR_DATA_LOCATION_FIELD) == 1:
            names.append(bytes(found.get(TENSOR_NAME_FIELD, b'?')).decode(errors='replace'))
    return names


def graph_bytes(model_blob):
    """Return the serialized GraphProto of a serialized ONNX model (raise WireError if absent)."""
    graphs = [
        bytes(v) for n, w, v in fields(memoryview(model_blob)) if n == MODEL_GRAPH_FIELD and w == 2
    ]
    if len(graphs) != 1:
        raise WireError(f'{len(graphs)} graphs in the model, expected 1')
    return graphs[0]


def weights_sha256(model_blob):
    """Return the hex sha256 of a serialized ONNX model's graph (see module docstring)."""
    try:
        return hashlib.sha256(graph_bytes(model_blob)).hexdigest()
    except WireError as error:
        raise ValueError(f'not an ONNX model: {error}') from None
