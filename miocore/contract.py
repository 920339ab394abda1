"""Kept so plugins written against miocore 0.1 keep working: the contract checker now lives in
:mod:`miocore.testing.contract`."""

from miocore.testing.contract import (
    Contract,
    ContractReport,
    ContractViolation,
    ProblemSet,
    builtin_problems,
    check_contract,
    corpus_problems,
    generate_problems,
    spy_on,
)

__all__ = [
    "Contract",
    "ContractReport",
    "ContractViolation",
    "ProblemSet",
    "builtin_problems",
    "check_contract",
    "corpus_problems",
    "generate_problems",
    "spy_on",
]
