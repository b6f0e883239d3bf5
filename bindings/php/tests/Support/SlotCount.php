<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

/**
 * A count of the holders inside a semaphore, in a file of the test's own
 * under flock(): "inside most total". Holders of any process, PHP or a
 * command's child, note their coming and going, and the test reads the
 * most ever inside at once. Run as a script (php SlotCount.php FILE), it
 * is one hold's work: in, a few milliseconds, out.
 */
final class SlotCount
{
    public static function note(string $file, int $by): void
    {
        $h = fopen($file, 'r+');
        flock($h, LOCK_EX);
        [$in, $max, $total] = array_map('intval', explode(' ', (string) stream_get_contents($h)));
        $in += $by;
        ftruncate($h, 0);
        rewind($h);
        fwrite($h, $in . ' ' . max($max, $in) . ' ' . ($total + ($by > 0 ? 1 : 0)));
        flock($h, LOCK_UN);
        fclose($h);
    }

    /** @return array{0: int, 1: int, 2: int} inside, the most at once, the holds */
    public static function read(string $file): array
    {
        return array_map('intval', explode(' ', (string) file_get_contents($file)));
    }

    /** One hold's work. */
    public static function hold(string $file): void
    {
        self::note($file, 1);
        usleep(random_int(0, 3000));
        self::note($file, -1);
    }
}

if (PHP_SAPI === 'cli' && isset($argv[1]) && realpath($argv[0]) === __FILE__) {
    SlotCount::hold($argv[1]);
}
