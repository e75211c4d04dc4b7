"""The README's main job: automatic post-editing with a BERT-initialised, alpha-entmax
model, on a generated corpus unless --data is given (fairseq_sparse.ape.demo).

    python scripts/ape_demo.py [--data DIR] [--workdir DIR] [--max-epoch N] [--bert-layers N]
"""

from fairseq_sparse import configs
from fairseq_sparse.ape import demo


def main(argv=None):
    demo.run(configs.parse(demo.DemoConfig, demo.__doc__, argv))


if __name__ == "__main__":
    main()
