"""TensorFlow's error text as the tests compare it: the words every host writes alike.

The server passes TensorFlow's own message on, as TF Serving does, and part of
that message depends on the host that ran the graph, not on the request
(docs/robustness.md, "Tests that never assume a host's CPU or speed"):

- the node annotation after the message (a tab, then `[[...]]`): the node that
  raised, named as the graph ran after TensorFlow rewrote it, either inside
  the signature's function or inlined into the graph with its call's prefix;
- the kernel library's words: with oneDNN's kernels (TF_ENABLE_ONEDNN_OPTS,
  on by default only on some CPUs) MatMul words a rank it cannot take
  differently from Eigen's kernel.

`tf_text(text)` writes each of those as one placeholder and leaves the rest
of the text as it was, so a test compares TensorFlow's message exactly
except for what a host decides. Golden answers (tests/container/answers)
record it normalized. Every test that compares a message TensorFlow wrote
goes through this one function; no test names an annotation or a kernel's
words itself.
"""

from __future__ import annotations

import re

#: What a node annotation becomes.
NODE = "[[<node>]]"
#: What MatMul's words for an input of a rank it cannot take become.
NOT_A_MATRIX = "<MatMul: an input is not a matrix>"

#: One annotation: `[[` then one or more `{{node NAME}}` or `{{function_node NAME}}`, `]]`.
_ANNOTATION = re.compile(r"\[\[(?:\{\{(?:function_)?node [^{}]+\}\})+\]\]")
#: MatMul's words for an input that is not a matrix: Eigen's kernel (shapes
#: written [d0,d1,...]), then oneDNN's (its MatMul, its MatMul fused with Add).
_NOT_A_MATRIX = re.compile(
    r"In\[0\] and In\[1\] has different ndims: \[[\d,]*\] vs\. \[[\d,]*\]"
    r"|In\[0\] ndims must be >= 2"
    r"|In\[0\] is not a matrix"
)

#: Texts TensorFlow 2.21 wrote in the image (TF_ENABLE_ONEDNN_OPTS=0, then =1),
#: and what tf_text makes of them: tests/unit/project/test_tf_text.py checks them.
SEEN = (
    # matmul/1 (tests/container/make_grpc_models.py), x [1, 3]
    (
        "Matrix size-incompatible: In[0]: [1,3], In[1]: [2,1]\n\t "
        "[[{{function_node __inference_<lambda>_289}}{{node MatMul}}]]",
        f"Matrix size-incompatible: In[0]: [1,3], In[1]: [2,1]\n\t {NODE}",
    ),
    (
        "Matrix size-incompatible: In[0]: [1,3], In[1]: [2,1]\n\t "
        "[[{{node PartitionedCall/PartitionedCall/MatMul}}]]",
        f"Matrix size-incompatible: In[0]: [1,3], In[1]: [2,1]\n\t {NODE}",
    ),
    # matmul/1, x [2]
    (
        "In[0] and In[1] has different ndims: [2] vs. [2,1]\n\t "
        "[[{{function_node __inference_<lambda>_289}}{{node MatMul}}]]",
        f"{NOT_A_MATRIX}\n\t {NODE}",
    ),
    (
        "In[0] ndims must be >= 2\n\t [[{{node PartitionedCall/PartitionedCall/MatMul}}]]",
        f"{NOT_A_MATRIX}\n\t {NODE}",
    ),
    # the compose demo's Keras model (demo/train.py), x [1, 1, 2], in a REST body
    (
        '{"error":"In[0] and In[1] has different ndims: [1,1,2] vs. [1,1]\\n\\t [[{{function_node '
        '__inference_serve_1355}}{{node sequential_1_1/dense_1_1/MatMul}}]]"}',
        f'{{"error":"{NOT_A_MATRIX}\\n\\t {NODE}"}}',
    ),
    (
        '{"error":"In[0] is not a matrix\\n\\t [[{{node StatefulPartitionedCall/'
        'StatefulPartitionedCall/sequential_1_1/dense_1_1/Add}}]]"}',
        f'{{"error":"{NOT_A_MATRIX}\\n\\t {NODE}"}}',
    ),
)


def tf_text(text: str) -> str:
    """`text` with TensorFlow's host-dependent words replaced by placeholders.

    Works on the message itself and on a JSON body that carries it (the
    patterns hold no character JSON escapes).
    """
    return _NOT_A_MATRIX.sub(NOT_A_MATRIX, _ANNOTATION.sub(NODE, text))
