<?php

declare(strict_types=1);

namespace Tokenlock;

/** The lock stayed held by others for the whole wait. */
class TimeoutException extends NotAcquiredException
{
}
