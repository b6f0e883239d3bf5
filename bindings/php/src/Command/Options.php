<?php

declare(strict_types=1);

namespace Tokenlock\Command;

use Tokenlock\Exception;
use Tokenlock\Native;

/**
 * The options of the module's calls checked, and turned into the
 * command's arguments: waits, leases, groups, sync levels, paths, and
 * the counter values the command prints (up to 2^64-1, as strings past
 * PHP_INT_MAX).
 *
 * @internal
 */
trait Options
{
    /**
     * The value `tokenlock incr` printed.
     *
     * @param list<string> $argv the command line, for the error
     */
    public static function counterValue(string $out, array $argv): int|string
    {
        $text = trim($out);
        if (!preg_match('/\A[0-9]{1,20}\z/', $text)) {
            throw new Exception('command_failed', "tokenlock: incr: the command printed \"$text\" instead of a number", 70, $argv);
        }
        return self::toInt($text);
    }

    /** A decimal as an int, or as the string itself beyond PHP_INT_MAX. */
    public static function toInt(string $digits): int|string
    {
        $max = (string) PHP_INT_MAX;
        if (strlen($digits) < strlen($max) || (strlen($digits) === strlen($max) && strcmp($digits, $max) <= 0)) {
            return (int) $digits;
        }
        return $digits;
    }

    /** Whether a decimal without leading zeros is at most 2^64-1, the counter's range. */
    public static function fitsUint64(string $digits): bool
    {
        return strlen($digits) < 20 || (strlen($digits) === 20 && strcmp($digits, '18446744073709551615') <= 0);
    }

    /**
     * Refuses option names a function does not take, so that a misspelt
     * option is not silently ignored.
     *
     * @param array<string, mixed> $options
     * @param list<string> $known
     */
    public static function checkKeys(array $options, array $known, string $function): void
    {
        if ($options === []) {
            return;
        }
        $unknown = array_diff(array_keys($options), $known);
        if ($unknown) {
            throw new \InvalidArgumentException("Tokenlock\\$function: unknown option '" . implode("', '", $unknown)
                . "'; it takes " . implode(', ', $known));
        }
    }

    /**
     * A duration option in seconds; null (and INF) mean no limit.
     *
     * @param mixed $value
     */
    public static function seconds($value, string $name): ?float
    {
        if ($value === null) {
            return null;
        }
        if ((!is_int($value) && !is_float($value)) || is_nan((float) $value) || $value < 0) {
            throw new \InvalidArgumentException("Tokenlock: $name must be a number of seconds, 0 or more");
        }
        return is_infinite((float) $value) ? null : (float) $value;
    }

    /**
     * The options that give `tokenlock write` or `incr` the `wait` of
     * $options: none without one (the command's 10 s), `--nonblock` for 0,
     * else `--wait SECS`, null and anything beyond a year as a year.
     *
     * @param array{wait?: int|float|null} $options
     * @return list<string>
     */
    public static function fileWaitArgs(array $options): array
    {
        if (!array_key_exists('wait', $options)) {
            return [];
        }
        $wait = self::seconds($options['wait'], 'wait');
        if ($wait !== null && $wait <= 0) {
            return ['--nonblock'];
        }
        return ['--wait', self::formatSeconds(min($wait ?? self::LONGEST_WAIT, self::LONGEST_WAIT))];
    }

    /**
     * `--group G` for the `group` option; without it the command reads
     * TOKENLOCK_GROUP from the environment it inherits, as this module does.
     *
     * @param array{group?: string|int|null} $options
     * @return list<string>
     */
    public static function groupArgs(array $options): array
    {
        if (!isset($options['group'])) {
            return [];
        }
        Native::group($options['group']);
        return ['--group', (string) $options['group']];
    }

    /**
     * The `wait` of a native writeFile() or increment(), as Native::acquire()
     * takes it: none given is the command's 10 s, null waits without limit.
     *
     * @param array{wait?: int|float|null} $options
     * @return array{wait: ?float}
     */
    public static function fileWait(array $options): array
    {
        return ['wait' => array_key_exists('wait', $options) ? self::seconds($options['wait'], 'wait') : self::DEFAULT_WAIT];
    }

    /** Seconds as the command reads them: plain decimal, never an exponent. */
    public static function formatSeconds(float $seconds): string
    {
        $text = rtrim(rtrim(sprintf('%.6F', $seconds), '0'), '.');
        return $text === '' ? '0' : $text;
    }

    /**
     * A durability level, checked.
     *
     * @param mixed $level
     */
    public static function sync($level): string
    {
        if (!in_array($level, ['none', 'file', 'file_and_dir'], true)) {
            throw new \InvalidArgumentException('Tokenlock: sync must be none, file or file_and_dir');
        }
        return $level;
    }

    /**
     * A path argument, checked: PHP strings may hold NUL, which no path can.
     *
     * @param mixed $path
     */
    public static function path($path, string $what): string
    {
        if (!is_string($path) || $path === '' || strpos($path, "\0") !== false) {
            throw new \InvalidArgumentException("Tokenlock: the $what must be a non-empty path without NUL bytes");
        }
        return $path;
    }
}
