<?php

declare(strict_types=1);

namespace Tokenlock;

/** The lock was held by another live process and no wait was asked for. */
class BusyException extends NotAcquiredException
{
}
