<?php

declare(strict_types=1);

namespace Tokenlock;

/**
 * The lock does not hold the token any more: it was taken over (its lease
 * ended, its owner was judged dead, or `tokenlock break --force`), so
 * another process may have entered the critical section meanwhile.
 */
class LockLostException extends Exception
{
}
