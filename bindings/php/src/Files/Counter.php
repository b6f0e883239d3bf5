<?php

declare(strict_types=1);

namespace Tokenlock\Files;

use Tokenlock\Command;
use Tokenlock\Exception;
use Tokenlock\Native;

/**
 * The counter of increment(): a decimal up to 2^64-1, added without
 * PHP's integers overflowing to floats.
 *
 * @internal
 */
trait Counter
{
    /** The sum of two unsigned decimals, or null past 2^64-1. */
    public static function addU64(string $a, string $b): ?string
    {
        $r = '';
        $carry = 0;
        for ($i = strlen($a) - 1, $j = strlen($b) - 1; $i >= 0 || $j >= 0 || $carry; --$i, --$j) {
            $s = $carry + ($i >= 0 ? (int) $a[$i] : 0) + ($j >= 0 ? (int) $b[$j] : 0);
            $r = ($s % 10) . $r;
            $carry = intdiv($s, 10);
        }
        $r = ltrim($r, '0');
        $r = $r === '' ? '0' : $r;
        return Command::fitsUint64($r) ? $r : null;
    }

    /**
     * increment()'s step: the counter's new contents and value.
     *
     * @return array{0: string, 1: int|string}
     */
    public static function count(string $path, ?string $text, int $by): array
    {
        $old = '0';
        if ($text !== null) {
            if (!preg_match('/\A(0|[1-9][0-9]{0,19})\n\z/', $text, $m) || !Command::fitsUint64($m[1])) {
                $shown = addcslashes(substr($text, 0, 24), "\0..\37\177..\377") . (strlen($text) > 24 ? '...' : '');
                throw new Exception('corrupt_data', "tokenlock: read counter $path: the file does not hold one unsigned decimal and a newline (it holds \"$shown\", " . strlen($text) . ' bytes); it was left as it is: repair or remove it by hand', 65);
            }
            $old = $m[1];
        }
        $new = self::addU64($old, (string) $by);
        if ($new === null) {
            throw Native::systemError('increment', $path, "adding $by to $old would overflow 64 bits; the counter was left as it is", 75, 'reset the counter by hand if it is meant to wrap');
        }
        return ["$new\n", Command::toInt($new)];
    }
}
