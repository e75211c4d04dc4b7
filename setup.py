"""fairseq-sparse: a fairseq plugin for sparse attention, BERT-based APE and sparse latent variables.

Build the fused CPU kernel in place with:  pip install --no-build-isolation -e .
(it compiles against the installed torch, hence no build isolation).
"""

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="fairseq-sparse",
    version="0.1.0",
    description="Adaptively sparse attention, BERT-initialised APE and sparse latent variables for fairseq",
    packages=find_packages(include=["fairseq_sparse", "fairseq_sparse.*"]),
    python_requires=">=3.10",
    ext_modules=[
        CppExtension(
            "fairseq_sparse.entmax._C",
            ["fairseq_sparse/entmax/csrc/entmax_cpu.cpp"],
            extra_compile_args=["-O3", "-fopenmp", "-fno-trapping-math"],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    entry_points={
        "console_scripts": [
            "fairseq-sparse-attention-report = fairseq_sparse.analysis.attention_report:main",
            "fairseq-sparse-ape-binarize = fairseq_sparse.data.ape_binarize:main",
            "fairseq-sparse-sentence-vae-binarize = fairseq_sparse.data.sentence_vae_binarize:main",
        ]
    },
)
