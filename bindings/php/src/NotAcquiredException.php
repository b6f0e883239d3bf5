<?php

declare(strict_types=1);

namespace Tokenlock;

/**
 * The lock was not acquired: it was busy (BusyException) or the wait ran
 * out (TimeoutException). Nothing was changed.
 */
class NotAcquiredException extends Exception
{
}
