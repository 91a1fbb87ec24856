"""The error of a user option: raised before any job runs, it names the option and the fix."""

from __future__ import annotations

from rocketmq_spark.remoting.errors import RocketMQError


class ConfigurationError(RocketMQError, ValueError):
    """A user option is missing or invalid.

    The message always names the option and says how to fix it.
    """

    def __init__(self, option: str, problem: str, fix: str) -> None:
        self.option = option
        self.problem = problem
        self.fix = fix
        super().__init__(f"option '{option}': {problem}. {fix}")
